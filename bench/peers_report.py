"""The arithmetic of ``chrono bench peers``: from what the workers recorded to the table's row.

Pure functions, no services: every system's run ends as a list of :class:`Start` (one per task
a worker started: which occurrence, when it was due, published and started) and is summarized
the same way, so the systems are compared on one rule.

An occurrence is a (key, due time) pair. A one-time job's start carries its due time. A cron
entry's start of a scheduler that does not tell which minute it fired for (Celery beat,
django-celery-beat, RedBeat) is given the latest measured minute at or before its publish (its
start when no publish time is known), allowing ``EARLY_MS`` (500 ms) for a scheduler that fires
a little early; a start before every measured minute, or of the minute after the last one,
counts as ``unexpected``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench.common import summarize_ms

# Celery beat wakes on its own clock and may publish a few ms before the minute.
EARLY_MS = 500


@dataclass(frozen=True)
class Start:
    """One task a worker started: ``key`` names the job (a cron entry, a one-time job, a Chrono
    execution), ``due_ms`` when it was due (None: a cron entry's minute, to be found),
    ``published_ms`` when its message was published (None: unknown), ``started_ms`` when the
    task began."""

    key: str
    due_ms: int | None
    published_ms: int | None
    started_ms: int


def occurrence_due(start: Start, minutes: Sequence[int]) -> int | None:
    """The due time of the occurrence ``start`` ran: its own, or the measured minute it
    belongs to (None: before every one of them)."""
    if start.due_ms is not None:
        return start.due_ms
    seen = start.published_ms if start.published_ms is not None else start.started_ms
    candidates = [m for m in minutes if m <= seen + EARLY_MS]
    return max(candidates) if candidates else None


def summarize(starts: Iterable[Start], *, expected: int, minutes: Sequence[int] = (),
              window_ms: int = 60_000) -> dict[str, object]:
    """Fired vs expected, missed, duplicates, publish and start lateness (of each occurrence's
    first start) and the publish rate in the burst, of one system's run.

    ``minutes`` are the measured cron minutes (empty for one-time jobs); a start due outside
    ``[first minute, last minute + window_ms)`` (a minute that was not measured) is left out.
    The publish rate is per minute for cron (its burst: the occurrences of one minute over the
    span from its first to its last publish), and over the whole span for one-time jobs.
    """
    copies: Counter[tuple[str, int]] = Counter()
    first: dict[tuple[str, int], Start] = {}
    unexpected = 0
    # the minute after the last measured one too, so that its starts are not taken for it
    bounds = [*minutes, minutes[-1] + window_ms] if minutes else []
    for start in starts:
        due = occurrence_due(start, bounds)
        if due is None or (minutes and not minutes[0] <= due < minutes[-1] + window_ms):
            unexpected += 1
            continue
        occurrence = (start.key, due)
        copies[occurrence] += 1
        if occurrence not in first or start.started_ms < first[occurrence].started_ms:
            first[occurrence] = start
    fired = len(copies)
    publish = [s.published_ms - due for (_, due), s in first.items() if s.published_ms is not None]
    started = [s.started_ms - due for (_, due), s in first.items()]
    return {
        "expected": expected,
        "fired": fired,
        "missed": max(0, expected - fired),
        "duplicates": sum(n - 1 for n in copies.values()),
        "unexpected": unexpected,
        "publish_lateness_ms": summarize_ms(publish),
        "start_lateness_ms": summarize_ms(started),
        "publish_rate_per_s": publish_rates(first, minutes),
    }


def publish_rates(first: dict[tuple[str, int], Start], minutes: Sequence[int]) -> list[int | None]:
    """Messages per second from the first publish to the last: per measured minute, or one
    figure over every occurrence when there are no minutes."""
    groups: dict[int, list[int]] = {}
    for (_, due), start in first.items():
        if start.published_ms is not None:
            groups.setdefault(due if minutes else 0, []).append(start.published_ms)
    keys = list(minutes) if minutes else [0]
    return [_rate(groups.get(key, [])) for key in keys]


def _rate(published: list[int]) -> int | None:
    """Publishes a second; a burst published within one millisecond (the stamps' unit) is
    counted over 1 ms, so its rate is a lower bound."""
    if len(published) < 2:
        return None
    return round(len(published) * 1_000 / max(1, max(published) - min(published)))


def bytes_per_pending_job(*, baseline_rss: int, peak_rss: int, pending: int) -> int | None:
    """What the worker's memory grew by while the jobs were pending, per job (ETA tasks wait
    in the worker; a scheduler's jobs wait in the scheduler, and the worker barely grows)."""
    if pending <= 0:
        return None
    return max(0, peak_rss - baseline_rss) // pending


def markdown_table(rows: Sequence[dict[str, object]]) -> str:
    """The bench's results as the table bench/RESULTS.md keeps (one line per system and
    workload)."""
    head = ("| system | workload | fired / expected | missed | dup | publish p50 / p99 / max ms "
            "| start p50 / p99 / max ms | publish rate /s | worker B / pending job |")
    lines = [head, "|" + "---|" * 9]
    for row in rows:
        if row.get("skipped"):
            lines.append(f"| {row['system']} | {row['workload']} | {row['skipped']} "
                         "| | | | | | |")
            continue
        rates = ", ".join("-" if r is None else f"{r:,}" for r in row["publish_rate_per_s"])
        lines.append(
            f"| {row['system']} | {row['workload']} | {row['fired']:,} / {row['expected']:,} "
            f"| {row['missed']:,} | {row['duplicates']:,} | {_triple(row['publish_lateness_ms'])} "
            f"| {_triple(row['start_lateness_ms'])} | {rates} "
            f"| {_number(row.get('worker_bytes_per_pending_job'))} |")
    return "\n".join(lines)


def _triple(summary: dict[str, float] | None) -> str:
    if not summary:
        return "-"
    return " / ".join(f"{summary[k]:,.0f}" for k in ("p50", "p99", "max"))


def _number(value: object) -> str:
    return "-" if value is None else f"{value:,}"
