"""How fast a plain Celery worker drains its queue, counted outside the task's body.

Imported by ``peers_celery`` when ``PEERS_DRAIN_STATS`` names a directory (``chrono bench
drain``'s plain worker). Celery's ``task_prerun`` and ``task_postrun`` signals note, per
process, how many tasks ran, when the first started and when the last finished (wall clock,
ns); a thread of each process (a prefork child, or the thread pool's one process) writes them
to ``<dir>/<pid>`` as ``count first_ns last_ns`` every ``WRITE_INTERVAL_S`` when they changed,
replacing the file whole. The benchmark sums the files: its rate is the count over the span
from the first start to the last finish, the definition of Chrono's own drain rate (first
``started_at`` to last ``finished_at``).

The signals rather than the body: a task whose class overrides nothing runs on Celery's fast
path, as a plain no-op task does, and the body stays the no-op Chrono's worker runs.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from celery.signals import task_postrun, task_prerun

WRITE_INTERVAL_S = 0.05

_directory = Path(os.environ["PEERS_DRAIN_STATS"])
_lock = threading.Lock()
_state = {"count": 0, "first": 0, "last": 0, "pid": 0}


@task_prerun.connect
def _started(**_: object) -> None:
    now = time.time_ns()
    with _lock:
        if not _state["first"]:
            _state["first"] = now
        if _state["pid"] != os.getpid():  # the first task of this process (a forked child)
            _state["pid"] = os.getpid()
            threading.Thread(target=_write_while_running, name="peers-drain-stats",
                             daemon=True).start()


@task_postrun.connect
def _finished(**_: object) -> None:
    now = time.time_ns()
    with _lock:
        _state["count"] += 1
        _state["last"] = max(_state["last"], now)


def _write_while_running() -> None:
    written = None
    target = _directory / str(os.getpid())
    while True:
        with _lock:
            line = f"{_state['count']} {_state['first']} {_state['last']}\n"
        if line != written:
            partial = target.with_suffix(".tmp")
            partial.write_text(line)
            partial.replace(target)
            written = line
        time.sleep(WRITE_INTERVAL_S)
