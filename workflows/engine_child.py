"""The workflow engine as a child process of every worker (``CHRONO_WORKFLOW_ENGINE_IN_WORKER``,
on by default): one command still deploys a worker and the engine that advances its runs.

Why a process and not a thread of the worker: a thread-pool worker's tasks run in its main
process, and the engine's passes shared the interpreter with its 64 task threads. In
``chrono bench workflow`` the same worker made 347-491 steps/s with the engine as a thread and
685-827 with the engine in a process of its own (bench/RESULTS.md, session 24).

:class:`EngineChild` (in the worker) runs ``chrono workflow-engine --parent-pid PID`` and keeps
it running: when the child exits on its own (a crash, a kill) it is started again after a
backoff; the worker's shutdown stops it with SIGTERM (it finishes its pass) and waits. The child
(:func:`exit_with_parent`) stops when the worker is gone, even a worker killed with SIGKILL: the
kernel sends it SIGTERM (``PR_SET_PDEATHSIG``) and, where that is not available, a watch of its
parent's pid each second does. Nothing is lost while no engine runs: step ends wait in
``chrono_execution_end`` (``workflows.engine``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from chronocore import logs

log = logging.getLogger("chrono.workflows.engine")

RESTART_BACKOFF_S = (0.5, 10.0)  # first delay, longest delay
STABLE_AFTER_S = 60.0  # a child that ran this long restarts after the first delay again
STOP_TIMEOUT_S = 10.0
PARENT_POLL_S = 1.0
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class EngineChild:
    """Runs and keeps running one ``chrono workflow-engine`` child of this process."""

    def __init__(self, command: list[str] | None = None, *,
                 on_exit: Callable[[], None] = lambda: None) -> None:
        """``on_exit`` is called each time the child exits on its own (a metric's count)."""
        self._command = command or child_command()
        self._on_exit = on_exit
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._supervisor = threading.Thread(target=self._supervise, daemon=True,
                                            name="chrono-workflow-engine-child")

    @property
    def pid(self) -> int | None:
        with self._lock:
            process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def start(self) -> EngineChild:
        self._supervisor.start()
        return self

    def stopping(self) -> None:
        """Do not restart the child from now on (the worker is shutting down)."""
        self._stopping.set()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop the child (SIGTERM, then SIGKILL after ``timeout_s``) and do not restart it."""
        self._stopping.set()
        with self._lock:
            process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                log.error("workflow engine child %d did not stop in %.0f s: killed",
                          process.pid, timeout_s)
                process.kill()
                process.wait()
        self._supervisor.join(timeout_s)

    def _supervise(self) -> None:
        # The child's PR_SET_PDEATHSIG fires when the thread that started it ends: this one,
        # which lives as long as the worker (until stop()).
        delay_s = RESTART_BACKOFF_S[0]
        while True:
            with self._lock:
                if self._stopping.is_set():
                    return
                started = time.monotonic()
                try:
                    self._process = subprocess.Popen(self._command)
                except OSError as exc:  # out of processes or memory: tried again, not given up
                    self._process = None
                    log.error("could not start the workflow engine child, again in %.1f s: %r",
                              delay_s, exc)
            if self._process is not None:
                process = self._process
                log.info("workflow engine child %d started", process.pid)
                code = process.wait()
                if self._stopping.is_set():
                    return
                if time.monotonic() - started >= STABLE_AFTER_S:
                    delay_s = RESTART_BACKOFF_S[0]
                log.error("workflow engine child %d exited (%s); starting another in %.1f s",
                          process.pid, _exit_text(code), delay_s)
                self._on_exit()
            if self._stopping.wait(delay_s):
                return
            delay_s = min(delay_s * 2, RESTART_BACKOFF_S[1])


def child_command() -> list[str]:
    """``chrono workflow-engine`` for a child of this process, with its log options."""
    level, log_format = logs.current()
    return [sys.executable, "-m", "chronoadmin.cli", "workflow-engine",
            "--parent-pid", str(os.getpid()),
            "--log-level", level, "--log-format", log_format]


def engine_children(pid: int) -> list[int]:
    """The pids of the ``chrono workflow-engine`` children of process ``pid`` (Linux's /proc)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:  # a thread that ended since the listing
            continue
        for child in children:
            try:
                if b"workflow-engine" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(int(child))
            except FileNotFoundError:  # a child that exited since
                continue
    return found


def exit_with_parent(parent_pid: int, stop: Callable[[], None]) -> None:
    """Call ``stop`` once the process ``parent_pid`` (this one's parent) is gone."""
    _ask_for_signal_at_parent_death(signal.SIGTERM)
    if os.getppid() != parent_pid:  # gone before the request took effect
        stop()
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        log.warning("workflow engine: parent %d is gone, stopping", parent_pid)
        stop()

    threading.Thread(target=watch, daemon=True, name="chrono-parent-watch").start()


def _ask_for_signal_at_parent_death(signum: int) -> None:
    # prctl(2) through ctypes: the packages that wrap it (python-prctl, pyprctl) are unmaintained
    # since 2020-2021, and this is one call. Linux only; elsewhere the watch above stops us.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_PDEATHSIG) failed: errno %d", ctypes.get_errno())
    except (OSError, AttributeError):
        pass


def _exit_text(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"
