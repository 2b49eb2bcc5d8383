"""The supervision of a worker's workflow engine child (``workflows.engine_child``), with real
processes standing in for ``chrono workflow-engine``: restarted with a backoff when it exits on
its own, stopped (and killed when SIGTERM is not enough) for good when the worker stops, and a
child that outlives its parent's SIGKILL only until it sees its parent gone."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

from tests.helpers import process_gone, wait_for
from workflows import engine_child
from workflows.engine_child import EngineChild


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_child_that_exits_is_started_again_after_a_backoff_that_grows(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_child, "RESTART_BACKOFF_S", (0.2, 0.4))
    starts = tmp_path / "starts"
    child = EngineChild(_python(f"""
        import time
        with open({str(starts)!r}, "a") as f:
            f.write(f"{{time.monotonic()}}\\n")
    """)).start()
    try:
        assert wait_for(lambda: starts.exists() and len(starts.read_text().split()) >= 4,
                        timeout_s=15)
    finally:
        child.stop(timeout_s=5)
    moments = [float(x) for x in starts.read_text().split()]
    gaps = [b - a for a, b in zip(moments, moments[1:], strict=False)]
    assert gaps[0] >= 0.2 and all(gap >= 0.4 for gap in gaps[1:3]), gaps
    count = len(moments)
    time.sleep(1.0)
    assert len(starts.read_text().split()) == count, "restarted after stop()"


def test_stop_kills_a_child_that_ignores_sigterm_and_never_restarts_it(tmp_path):
    ready = tmp_path / "ready"
    child = EngineChild(_python(f"""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open({str(ready)!r}, "w").close()
        time.sleep(60)
    """)).start()
    assert wait_for(ready.exists, timeout_s=15)
    pid = child.pid
    began = time.monotonic()
    child.stop(timeout_s=0.5)
    assert 0.5 <= time.monotonic() - began < 5
    assert child.pid is None
    assert process_gone(pid)


def test_a_child_whose_parent_is_killed_stops(tmp_path):
    """A parent (standing in for the worker) starts a child that calls ``exit_with_parent``;
    the parent is killed with SIGKILL; the child's stop function runs within a second or two."""
    stopped = tmp_path / "stopped"
    child_code = textwrap.dedent(f"""
        import os, signal, threading
        from workflows.engine_child import exit_with_parent
        done = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: done.set())  # as chrono workflow-engine does
        exit_with_parent(os.getppid(), done.set)
        print(os.getpid(), flush=True)
        done.wait(30)
        open({str(stopped)!r}, "w").close()
    """)
    parent = subprocess.Popen(_python(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", {child_code!r}])
        time.sleep(60)
    """), stdout=subprocess.PIPE)
    child_pid = int(parent.stdout.readline())
    assert not stopped.exists()
    parent.send_signal(signal.SIGKILL)
    parent.wait(5)
    assert wait_for(stopped.exists, timeout_s=5), "the child did not see its parent go"
    assert wait_for(lambda: process_gone(child_pid), timeout_s=5)


def test_a_child_that_could_not_be_started_is_tried_again(tmp_path, monkeypatch):
    monkeypatch.setattr(engine_child, "RESTART_BACKOFF_S", (0.2, 0.4))
    program, ran = tmp_path / "engine", tmp_path / "ran"
    child = EngineChild([str(program)]).start()  # no such program yet: Popen raises
    try:
        time.sleep(0.5)
        program.write_text(f"#!/bin/sh\ntouch {ran}\nsleep 60\n")
        program.chmod(0o755)
        assert wait_for(ran.exists, timeout_s=10), "not tried again once it could start"
    finally:
        child.stop(timeout_s=5)
