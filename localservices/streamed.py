"""Run a command and hand its output to the caller line by line while it runs, for the long
installs of ``chrono services up`` (apt-get, Maven) whose lines drive a progress display.

:func:`localservices.base.run_command` waits for the end and returns everything at once, which
is right for the short commands; here each line of the command's output (stdout and stderr
together, as a terminal would show them) goes to ``on_output`` as it comes, and a command that
writes machine-readable status to a file descriptor of its own (apt's ``APT::Status-Fd``) gets
a pipe for it: the argument :data:`STATUS_FD` in its command line becomes that descriptor's
number, and each line written to it goes to ``on_status``. A carriage return ends a line too
(dpkg redraws "Reading database ... 45%" with one). The result is a ``CompletedProcess`` like
``run_command``'s, its ``stdout`` the whole output, so :func:`localservices.base.output_tail`
works on it.
"""

from __future__ import annotations

import codecs
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path

from localservices.errors import ServiceError

# Written in an argument, it is replaced by the number of the status pipe's descriptor.
STATUS_FD = "{status_fd}"
READ_BYTES = 65_536
# After SIGTERM on a timeout, the command's process group has this long before SIGKILL.
KILL_GRACE_S = 5.0

LineHandler = Callable[[str], None]


class _Lines:
    """Bytes from one pipe as whole lines, ended by a newline, a carriage return or both (UTF-8,
    undecodable bytes replaced; a character or a CR LF split between two reads is put back
    together)."""

    def __init__(self, handler: LineHandler, kept: list[str] | None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        # The last read ended with a CR: a LF first in the next one ends no other line.
        self._after_cr = False
        self._handler = handler
        self._kept = kept

    def feed(self, data: bytes, *, final: bool = False) -> None:
        decoded = self._decoder.decode(data, final=final)
        if self._kept is not None:
            self._kept.append(decoded)
        if self._after_cr and decoded.startswith("\n"):
            decoded = decoded[1:]
        self._after_cr = decoded.endswith("\r")
        *lines, self._partial = (self._partial + decoded).replace("\r\n", "\n").replace(
            "\r", "\n").split("\n")
        if final and self._partial:
            lines.append(self._partial)
            self._partial = ""
        for line in lines:
            self._handler(line)


def run_streamed(
    argv: Sequence[str],
    *,
    on_output: LineHandler,
    on_status: LineHandler | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with its output going, line by line, to ``on_output`` (and the lines it
    writes to the descriptor named by :data:`STATUS_FD` in ``argv`` to ``on_status``), and
    return its exit status and whole output. Raises ServiceError when it cannot start or does
    not finish within ``timeout_s`` (its process group is then terminated)."""
    status_read, status_write = os.pipe() if on_status is not None else (None, None)
    command = [arg.replace(STATUS_FD, str(status_write)) for arg in argv]
    try:
        process = subprocess.Popen(
            command, cwd=cwd, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
            pass_fds=() if status_write is None else (status_write,),
        )
    except OSError as error:
        for descriptor in (status_read, status_write):
            if descriptor is not None:
                os.close(descriptor)
        raise ServiceError(f"could not run {argv[0]}: {error}") from None
    if status_write is not None:
        os.close(status_write)  # the child holds its own copy; its exit ends the pipe
    output: list[str] = []
    try:
        _pump(process, status_read, on_output, on_status, output,
              deadline=time.monotonic() + timeout_s)
    except TimeoutError:
        _stop(process)
        raise ServiceError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f} s") from None
    except BaseException:
        _stop(process)  # a handler failed: the command must not run on unwatched
        raise
    finally:
        if status_read is not None:
            os.close(status_read)
        assert process.stdout is not None  # stdout=PIPE above
        process.stdout.close()
    return subprocess.CompletedProcess(command, process.wait(), "".join(output), "")


def _pump(process: subprocess.Popen, status_read: int | None, on_output: LineHandler,
          on_status: LineHandler | None, output: list[str], *, deadline: float) -> None:
    """Read both pipes until the command closes them; TimeoutError past ``deadline``."""
    assert process.stdout is not None  # stdout=PIPE
    readers = {process.stdout.fileno(): _Lines(on_output, output)}
    if status_read is not None and on_status is not None:
        readers[status_read] = _Lines(on_status, None)
    with selectors.DefaultSelector() as selector:
        for descriptor in readers:
            selector.register(descriptor, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            for key, _ in selector.select(timeout=remaining):
                data = os.read(key.fd, READ_BYTES)
                readers[key.fd].feed(data, final=not data)
                if not data:
                    selector.unregister(key.fd)
    remaining = deadline - time.monotonic()
    try:
        process.wait(timeout=max(remaining, 0.0))
    except subprocess.TimeoutExpired:
        raise TimeoutError from None


def _stop(process: subprocess.Popen) -> None:
    """Terminate the command's process group (apt's dpkg, Maven's JVM), then kill it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
