"""The dashboard's queue panel: messages ready and consumers of each queue, from RabbitMQ, and
the executions waiting on it, without RabbitMQ ever holding up the dashboard.

RabbitMQ is asked by :class:`scheduler.queue_stats.QueueInspector` (a passive declare per
queue), on a thread of its own: a dashboard request starts a question when the last answer is
older than :data:`QUEUE_STATS_TTL_S` and waits for it at most :data:`QUEUE_STATS_WAIT_MS`.
When the answer is late, or RabbitMQ failed, the panel shows the last answer, marked stale
with its age and why, or, with no answer younger than :data:`STALE_LIMIT_S`, each queue's
depth and consumers as unknown with the reason. A question still running is never asked
twice: one slow broker costs one thread, never one per request. So the dashboard's figures
come within their usual time however slow RabbitMQ is (the inspector's own timeouts, 2 s to
connect and per read, end a question that hangs).

The queues shown are the default queue, those live workers consume, and those executions wait
on (DISPATCHED longer than ``undelivered_flag_after_ms``, or flagged: the reaper's query,
:func:`reaper.undelivered.waiting_queues`), at most :data:`MAX_QUEUES`. Retry tiers have no
consumers by design and are left out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from functools import cache

# get_config() here: the dashboard's queues panel is read by a Django view: the process edge,
# nothing owns it to hand it the configuration.
from chronocore.config import get_config
from reaper.undelivered import WaitingQueue, waiting_queues
from scheduler.clock import now_ms
from scheduler.queue_stats import BrokerUnavailable, QueueInspector, QueueStats

QUEUE_STATS_TTL_S = 5.0
QUEUE_STATS_WAIT_MS = 250
STALE_LIMIT_S = 60.0
MAX_QUEUES = 50


@dataclass(frozen=True)
class _Answer:
    at: float  # monotonic
    stats: dict[str, QueueStats]


class QueuePanel:
    """One process's view of the queues: the last answer, and at most one question running."""

    def __init__(self, *, inspector: Callable[[], QueueInspector],
                 ttl_s: float = QUEUE_STATS_TTL_S, wait_ms: int = QUEUE_STATS_WAIT_MS,
                 stale_limit_s: float = STALE_LIMIT_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._make_inspector = inspector
        self._inspector: QueueInspector | None = None
        self.ttl_s = ttl_s
        self.wait_ms = wait_ms
        self.stale_limit_s = stale_limit_s
        self._clock = clock
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chrono-queues")
        self._question: Future | None = None
        self._asked_at = 0.0
        self._answer: _Answer | None = None
        self._error = ""

    def stats(self, queues: Iterable[str]) -> dict:
        """The panel for ``queues``: ``state`` ok, stale or unknown, ``reason`` when not ok,
        ``age_s`` of the answer shown, and a row per queue."""
        names = list(dict.fromkeys(queues))
        with self._lock:
            answer = self._answer
            fresh = (answer is not None and self._clock() - answer.at < self.ttl_s
                     and set(names) <= set(answer.stats))
            if not fresh and (self._question is None or self._question.done()):
                self._asked_at = self._clock()
                self._question = self._executor.submit(self._ask, names)
            question = self._question
        if not fresh:
            try:
                question.result(timeout=self.wait_ms / 1000)
            except FutureTimeout:
                pass  # shown as stale or unknown below; the question goes on in its thread
        return self._panel(names)

    def _ask(self, names: list[str]) -> None:
        """On the panel's thread: one question to RabbitMQ, its answer or error kept."""
        try:
            if self._inspector is None:
                self._inspector = self._make_inspector()
            stats = self._inspector.stats(names)
        except BrokerUnavailable as exc:
            with self._lock:
                self._error = str(exc)
            return
        with self._lock:
            self._answer = _Answer(self._clock(), stats)
            self._error = ""

    def _panel(self, names: list[str]) -> dict:
        with self._lock:
            answer, error, asked_at = self._answer, self._error, self._asked_at
            running = self._question is not None and not self._question.done()
        now = self._clock()
        age = None if answer is None else now - answer.at
        if answer is not None and age < self.ttl_s and set(names) <= set(answer.stats):
            state, reason = "ok", None
        else:
            if running:
                reason = (f"RabbitMQ has not answered within {self.wait_ms} ms "
                          f"(asked {now - asked_at:.1f} s ago)")
            else:
                reason = error or "RabbitMQ has not answered yet"
            usable = answer is not None and age < self.stale_limit_s
            state = "stale" if usable else "unknown"
            if not usable:
                answer, age = None, None
        rows = []
        for name in names:
            entry = None if answer is None else answer.stats.get(name)
            rows.append({
                "queue": name,
                "exists": None if entry is None else entry.exists,
                "messages": None if entry is None or not entry.exists else entry.messages,
                "consumers": None if entry is None or not entry.exists else entry.consumers,
            })
        return {"state": state, "reason": reason,
                "age_s": None if age is None else round(age, 1), "queues": rows}


@cache
def queue_panel() -> QueuePanel:
    """The web process's panel (a thread and an AMQP connection of its own, not the ones of
    ``/metrics`` and ``/health/``, so that a question running here holds neither up)."""
    return QueuePanel(inspector=lambda: QueueInspector(get_config().broker_url))


def queues_panel(worker_queues: Iterable[str], *, panel: QueuePanel | None = None) -> dict:
    """The panel of the platform's queues: the default one, ``worker_queues`` (the queues live
    workers consume) and those executions wait on, each with its waiting and flagged
    executions."""
    config = get_config()
    waiting: dict[str, WaitingQueue] = waiting_queues(
        before_ms=now_ms() - config.undelivered_flag_after_ms)
    names = list(dict.fromkeys([config.default_queue, *sorted(worker_queues),
                                *sorted(waiting)]))[:MAX_QUEUES]
    data = (panel or queue_panel()).stats(names)
    for row in data["queues"]:
        entry = waiting.get(row["queue"])
        row["waiting"] = 0 if entry is None else entry.waiting
        row["flagged"] = 0 if entry is None else entry.flagged
    data["waiting_after_s"] = config.undelivered_flag_after_ms / 1000
    return data
