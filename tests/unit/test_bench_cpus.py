"""Benchmarks that keep processes on given cores: a child started there stays there, and a
running service pinned for a run gets every core back after it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from bench.common import processes_on_cpus
from bench.dispatch import _pinning


def test_pinning_splits_the_dispatch_path_from_the_worker():
    dispatch, worker = _pinning(True)
    assert len(dispatch) == 1 and worker and not dispatch & worker
    assert _pinning(False) == (set(), set())


def test_a_running_process_is_pinned_for_the_block_and_then_gets_every_core_back():
    # A process with a second thread, as a service has: every thread is moved, and back.
    child = subprocess.Popen([sys.executable, "-c",
                              "import threading, time; threading.Thread(target=time.sleep, "
                              "args=(30,)).start(); time.sleep(30)"])
    try:
        tasks = lambda: [int(t) for t in os.listdir(f"/proc/{child.pid}/task")]  # noqa: E731
        deadline = threading.Event()
        while len(tasks()) < 2 and not deadline.wait(0.05):
            pass
        with processes_on_cpus([child.pid], {0}):
            assert all(os.sched_getaffinity(t) == {0} for t in tasks())
        everywhere = set(range(os.cpu_count()))
        assert all(os.sched_getaffinity(t) == everywhere for t in tasks())
    finally:
        child.kill()
        child.wait()


def test_a_child_started_on_a_cpu_runs_only_there_and_at_its_nice_value():
    from functools import partial

    from localservices.processes import _limit_cpu

    out = subprocess.run(
        [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)), os.nice(0))"],
        preexec_fn=partial(_limit_cpu, 5, {1}), capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[1]", str(os.nice(0) + 5)]
