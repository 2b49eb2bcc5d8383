"""This machine's ceilings, measured in the same run as a benchmark, so its figure travels.

A figure such as "dispatch 5,800 jobs/s" means little on another VM of the same kind: the same
code gave 4,249/s on one whose bare py-amqp loop published 11,700 messages/s where this one
publishes ~20,000 (issue 19). Every ``chrono bench`` JSON line therefore carries ``ceilings``,
three yardsticks measured right after the benchmark, each in about a second or two:

* ``cpu_loops_per_s``: iterations per second of a fixed pure-Python loop (arithmetic, a dict
  and a list): how fast one core runs Python here;
* ``amqp_publish_per_s``: persistent messages per second that a bare py-amqp loop publishes
  unconfirmed to a quorum queue (what RabbitMQ accepts from one Python process);
* ``copy_rows_per_s``: rows per second that PostgreSQL's COPY writes into a table of five
  columns from one connection;

and ``ratio``: the benchmark's headline figure divided by the ceiling it is bounded by (a
dispatch rate by the publish ceiling, an ingest rate by the COPY ceiling, a latency by
nothing: ``ratio`` is then None). bench/RESULTS.md says how to read them.

The yardsticks are our own loops rather than a library's (pyperformance takes minutes and needs
its own environment): each must finish in seconds inside any benchmark run.
"""

from __future__ import annotations

import functools
import io
import time
import uuid
from collections.abc import Callable, Mapping

CPU_LOOP_S = 1.0
PUBLISH_MESSAGES = 20_000
PUBLISH_BODY = b'[[], {}, {"callbacks": null, "errbacks": null, "chain": null}]' + b" " * 140
COPY_ROWS = 100_000


def cpu_loops_per_s(duration_s: float = CPU_LOOP_S) -> float:
    """Iterations per second of a fixed loop of integer arithmetic, a dict and a list."""
    table: dict[int, int] = {}
    items: list[int] = []
    done = 0
    deadline = time.perf_counter() + duration_s
    started = time.perf_counter()
    while True:
        for i in range(1_000):
            value = (i * 2_654_435_761) % 1_000_003
            table[value & 1_023] = value
            items.append(value ^ i)
        items.clear()
        done += 1_000
        if time.perf_counter() >= deadline:
            break
    return done / (time.perf_counter() - started)


def amqp_publish_per_s(broker_url: str, messages: int = PUBLISH_MESSAGES) -> float:
    """Persistent messages per second a bare py-amqp loop publishes, unconfirmed, to a quorum
    queue of its own (deleted after); the rate counts until the broker has them all (a
    passive declare returns after every publish before it on the channel was handled)."""
    import amqp

    from bench.common import broker_connection

    queue = f"chrono-ceiling-{uuid.uuid4().hex[:8]}"
    with broker_connection(broker_url) as conn:
        channel = conn.channel()
        channel.queue_declare(queue, durable=True, auto_delete=False,
                              arguments={"x-queue-type": "quorum"})
        try:
            started = time.perf_counter()
            for _ in range(messages):
                channel.basic_publish(amqp.Message(PUBLISH_BODY, delivery_mode=2,
                                                   content_type="application/json"),
                                      exchange="", routing_key=queue)
            channel.queue_declare(queue, passive=True)
            elapsed = time.perf_counter() - started
        finally:
            channel.queue_delete(queue)
    return messages / elapsed


def copy_rows_per_s(rows: int = COPY_ROWS) -> float:
    """Rows per second PostgreSQL's COPY writes into a temporary table of five columns (a
    uuid, two timestamps, an integer and a short text, like a job row's hot columns)."""
    from django.db import connection, transaction

    line = "{}\t2026-12-01 12:00:00+00\t2026-12-01 12:00:01+00\t{}\tbench.ceiling\n"
    data = "".join(line.format(uuid.uuid4(), i) for i in range(rows))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE chrono_ceiling_copy (id uuid, a timestamptz, "
                       "b timestamptz, n integer, t text) ON COMMIT DROP")
        started = time.perf_counter()
        with cursor.copy("COPY chrono_ceiling_copy FROM STDIN") as copy:
            buffer = io.StringIO(data)
            while chunk := buffer.read(1 << 20):
                copy.write(chunk)
        elapsed = time.perf_counter() - started
    return rows / elapsed


def measure() -> dict[str, float]:
    """The three ceilings of this machine, now (services must be up)."""
    from chronocore.config import get_config

    return {
        "cpu_loops_per_s": round(cpu_loops_per_s()),
        "amqp_publish_per_s": round(amqp_publish_per_s(get_config().broker_url)),
        "copy_rows_per_s": round(copy_rows_per_s()),
    }


def ratio(report: Mapping[str, object], figure: str | None, ceiling: str | None,
          ceilings: Mapping[str, float]) -> dict[str, object] | None:
    """``{"figure", "of", "value"}``: ``report[figure] / ceilings[ceiling]``, or None when the
    benchmark's figure is bounded by none of them (or was not measured)."""
    value = _dotted(report, figure) if figure else None
    if not ceiling or not isinstance(value, int | float) or not ceilings.get(ceiling):
        return None
    # Four significant digits: a rate over millions of loops a second is a small number.
    return {"figure": figure, "of": ceiling, "value": float(f"{value / ceilings[ceiling]:.4g}")}


def with_ceilings(report: dict[str, object], *, figure: str | None = None,
                  of: str | None = None,
                  measure_ceilings: Callable[[], dict[str, float]] = measure,
                  ) -> dict[str, object]:
    """``report`` with this machine's ``ceilings`` and the ``ratio`` of its ``figure`` (a key,
    dotted for a nested one: ``minutes.0.publish_rate_per_s``) to the ceiling ``of``."""
    ceilings = measure_ceilings()
    return {**report, "ceilings": ceilings, "ratio": ratio(report, figure, of, ceilings)}


def reports_ceilings(*, figure: str | None = None, of: str | None = None,
                     ) -> Callable[[Callable[[list[str]], dict[str, object]]],
                                   Callable[[list[str]], dict[str, object]]]:
    """Decorate a benchmark's ``run(argv)``: its report gets :func:`with_ceilings`, measured
    after it ran (its processes stopped: the yardsticks do not compete with them)."""
    def decorate(run: Callable[[list[str]], dict[str, object]],
                 ) -> Callable[[list[str]], dict[str, object]]:
        @functools.wraps(run)
        def run_with_ceilings(argv: list[str]) -> dict[str, object]:
            return with_ceilings(run(argv), figure=figure, of=of)
        return run_with_ceilings
    return decorate


def _dotted(report: Mapping[str, object], path: str) -> object:
    value: object = report
    for part in path.split("."):
        if isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value
