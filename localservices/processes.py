"""Starting and stopping Chrono's processes (beat, worker, web) as real child processes.

Used by ``chrono dev`` / ``chrono demo``, by the benchmarks and by the end-to-end tests, which all
need the same thing: spawn ``python -m chronoadmin.cli <command>`` with a given environment, know
when it is ready, and stop it with a real signal (SIGTERM for a clean stop, SIGKILL or SIGSTOP
to break it on purpose).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from localservices.errors import ProcessFailed

REPO_ROOT = Path(__file__).resolve().parent.parent
STOP_TIMEOUT_S = 15.0


@dataclass
class ChronoProcess:
    """One running child: its name, ``Popen`` handle and log file."""

    name: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signum)

    def signal_group(self, signum: int) -> None:
        """Signal the child and everything it forked (a Celery worker's pool)."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signum)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (after SIGCONT, in case a test stopped it), then SIGKILL past the timeout."""
        if self.popen.poll() is None:
            self.signal_group(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.signal_group(signal.SIGKILL)
                self.popen.wait(timeout_s)
        # A Celery pool child can outlive a killed parent: reap the whole group.
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.popen.returncode

    def wait_until(
        self, ready: Callable[[], bool], *, timeout_s: float, what: str
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise ProcessFailed(
                    f"{self.name} exited with {self.popen.returncode} before {what}:\n"
                    f"{self.log_tail()}"
                )
            if ready():
                return
            time.sleep(0.1)
        raise ProcessFailed(
            f"{self.name}: {what} did not happen in {timeout_s} s:\n{self.log_tail()}"
        )


@dataclass
class ProcessGroup:
    """The children of one test, benchmark or dev session; ``stop_all`` on the way out."""

    env: Mapping[str, str]
    log_dir: Path
    children: list[ChronoProcess] = field(default_factory=list)

    def start(
        self, name: str, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
        nice: int = 0, cpus: Collection[int] | None = None, wrapper: Sequence[str] = (),
    ) -> ChronoProcess:
        """Start ``chrono ARGV`` as ``name``; ``nice`` lowers its CPU priority and ``cpus``
        keeps it on those cores (both for its threads and children too), e.g. a worker kept
        off the cores of a latency-bound beat. ``wrapper`` is a command that execs the rest
        in place (``ip netns exec NS``: the child keeps its pid, so signals still reach it)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log_file = open(log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        popen = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "chronoadmin.cli", *argv],
            cwd=REPO_ROOT,
            env={**os.environ, **self.env, **(env or {}), "PYTHONUNBUFFERED": "1"},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=(partial(_limit_cpu, nice, cpus)  # noqa: PLW1509 - no threads
                        if nice or cpus else None),
        )
        log_file.close()
        child = ChronoProcess(name=name, popen=popen, log_path=log_path)
        self.children.append(child)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.children):
            child.stop()
        self.children.clear()


def _limit_cpu(nice: int, cpus: Collection[int] | None) -> None:
    if nice:
        os.nice(nice)
    if cpus:
        os.sched_setaffinity(0, cpus)


def wait_until(
    condition: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.25
) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval_s)
    return condition()

