"""What every Chrono service shares: the :class:`Service` protocol and the process, port, file
and command helpers its implementations use.

Nothing here knows one server from another; each server is one module beside this one.
"""

from __future__ import annotations

import logging
import os
import pwd
import signal
import stat
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from importlib import resources
from pathlib import Path
from string import Template
from typing import Protocol

from localservices.errors import ServiceError, ServiceStartError

log = logging.getLogger("localservices")

POLL_INTERVAL_S = 0.25
# A daemon writes its pid file a moment after its launcher returns; until then "not running"
# means "not yet", not "died".
STARTUP_GRACE_S = 3.0
PROBE_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 120.0
EVICTION_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 8


# ------------------------------------------------------------------------------------- protocol


class Service(Protocol):
    """One server Chrono runs its own instance of.

    ``packages`` are the Debian packages it needs; ``debian_service`` is the init script of the
    distribution's own instance and ``process_names`` the program names of any server of this
    kind, so that one holding Chrono's ports can be told apart from an unrelated program and
    stopped (``stop_signal`` is its graceful-shutdown signal). A server with no distribution
    instance has an empty ``debian_service``: whatever holds its ports is then not Chrono's to
    stop, and ``up`` reports it instead.
    """

    name: str
    url_variable: str
    data_dir: Path
    packages: tuple[str, ...]
    debian_service: str
    process_names: tuple[str, ...]
    stop_signal: int
    start_timeout_s: float

    @property
    def address(self) -> str:
        """``host:port`` of its URL."""

    @property
    def ports(self) -> tuple[int, ...]:
        """Every TCP port it listens on, the URL's first."""

    @property
    def log_path(self) -> Path:
        """Its log file, or the directory of its log files."""

    def pid(self) -> int | None:
        """The pid of Chrono's running server process (from its pid file), or None."""

    def running(self) -> bool:
        """Whether Chrono's process for this service exists (it may still be booting)."""

    def ready(self) -> bool:
        """Whether the server accepts administrative work (before :meth:`provision`)."""

    def answers(self) -> bool:
        """Whether Chrono's instance serves its URL, with the URL's credentials."""

    def refuses_anonymous(self) -> bool:
        """Whether the running server refuses clients without the URL's credentials: no
        password, a wrong one, and the server's own well-known default login."""

    def restart_reason(self) -> str | None:
        """Why the running server must restart before it can require its credentials (it was
        started by an older Chrono, say), or None when configuring it live is enough."""

    def start(self) -> None:
        """Prepare the data directory and launch the server; waiting is the caller's job."""

    def provision(self) -> None:
        """Create the users, databases or virtual hosts the URL names, if missing, and make the
        running server require the URL's credentials (idempotent)."""

    def stop(self) -> None:
        """Stop Chrono's instance cleanly; a no-op when it is not running."""



# ------------------------------------------------------------------------- processes and ports


def process_name(pid: int) -> str:
    """The program name of ``pid`` (``postgres``, ``redis-server``, ``beam.smp``), or ""."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def pid_exists(pid: int) -> bool:
    """Whether ``pid`` still runs.

    A zombie does not count: daemons are re-parented to PID 1, and in a container PID 1 may reap
    them seconds later, while their /proc entry lingers.
    """
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def pid_alive(pid: int | None, *, comm: Sequence[str]) -> bool:
    """Whether ``pid`` runs and is one of the programs ``comm`` (guards against reused pids)."""
    return bool(pid) and pid_exists(pid) and process_name(pid) in comm


def read_pid(path: Path) -> int | None:
    """The pid on the first line of a pid file, or None."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _listening_inodes(port: int) -> set[str]:
    """Socket inodes listening on TCP ``port`` at any address, IPv4 or IPv6."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with suppress(OSError), open(table) as rows:
            next(rows)
            for row in rows:
                fields = row.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def _socket_inodes_of(pid: int) -> set[str]:
    """Inodes of the sockets ``pid`` holds open."""
    inodes = set()
    with suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    return inodes


def port_holders(port: int) -> list[int]:
    """Pids of the processes listening on TCP ``port``."""
    wanted = _listening_inodes(port)
    if not wanted:
        return []
    pids = (int(name) for name in os.listdir("/proc") if name.isdigit())
    return sorted(pid for pid in pids if _socket_inodes_of(pid) & wanted)


def holds_port(pid: int, port: int) -> bool:
    """Whether ``pid`` listens on ``port``; True when this user may not look (non-root status)."""
    if not os.access(f"/proc/{pid}/fd", os.R_OK):
        return True
    return bool(_socket_inodes_of(pid) & _listening_inodes(port))


def command_line(pid: int, *, max_chars: int = 120) -> str:
    """The command line of ``pid``, shortened for a log line (a beam.smp one runs to 600)."""
    with suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        return raw if len(raw) <= max_chars else raw[: max_chars - 1] + "…"
    return "?"


def wait_for_exit(pid: int, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_S)
    return not pid_exists(pid)


def terminate(pid: int, *, first_signal: int, what: str) -> None:
    """Send ``first_signal``, then SIGKILL if ``pid`` is still there after a grace period."""
    log.info("sending %s to %s (pid %d)", signal.Signals(first_signal).name, what, pid)
    with suppress(ProcessLookupError):
        os.kill(pid, first_signal)
    if not wait_for_exit(pid, timeout_s=EVICTION_TIMEOUT_S):
        log.warning("%s (pid %d) ignored it; sending SIGKILL", what, pid)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_for_exit(pid, timeout_s=5.0)


def run_command(
    argv: Sequence[str],
    *,
    user: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
    input_text: str | None = None,
    home: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (as ``user`` when given, the way ``runuser -u`` would) and capture output;
    ``input_text`` goes to its standard input (a secret, which a command line would show to
    every local user in /proc). ``home`` replaces ``user``'s home directory as ``HOME`` (an
    Erlang cookie of its own, say)."""
    full_env = {**os.environ, **(env or {})}
    ids: dict[str, object] = {}
    if user is not None:
        account = pwd.getpwnam(user)
        full_env.update(HOME=str(home or account.pw_dir), USER=user, LOGNAME=user)
        ids = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    try:
        return subprocess.run(
            list(argv),
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            **({"input": input_text} if input_text is not None else {"stdin": subprocess.DEVNULL}),
            check=False,
            **ids,
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f} s") from None
    except OSError as error:
        raise ServiceError(f"could not run {argv[0]}: {error}") from None


def output_tail(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stdout + result.stderr).strip().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def log_tail(path: Path) -> str:
    """The last lines of a log file, or of the newest file in a log directory."""
    if path.is_dir():
        written = [entry for entry in path.iterdir() if entry.is_file() and entry.stat().st_size]
        if not written:
            return "    (no log written yet)"
        path = max(written, key=lambda entry: entry.stat().st_mtime)
    try:
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return "    (no log written yet)"
    return f"  last lines of {path}:\n" + "\n".join("    " + line for line in lines)


def chown_tree(path: Path, user: str) -> None:
    """Give ``path`` and everything under it to ``user``."""
    account = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, account.pw_uid, account.pw_gid)


def write_owned(path: Path, text: str, *, user: str, mode: int = 0o644) -> bool:
    """Write ``text`` to ``path`` owned by ``user`` with ``mode``; False when it already held
    exactly that (nothing written, so a server watching the file sees no change)."""
    account = pwd.getpwnam(user)
    with suppress(OSError):
        status = path.stat()
        if (
            path.read_text() == text
            and stat.S_IMODE(status.st_mode) == mode
            and (status.st_uid, status.st_gid) == (account.pw_uid, account.pw_gid)
        ):
            return False
    # Created with the final mode, then filled: a secret is never readable by others, not even
    # for the moment between the write and a chmod.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(descriptor, "w") as file:
        os.fchmod(file.fileno(), mode)
        os.fchown(file.fileno(), account.pw_uid, account.pw_gid)
        file.write(text)
    return True


def render_template(template_name: str, **values: object) -> str:
    """Fill in one of the ``localservices/service_conf`` templates."""
    text = resources.files("localservices.service_conf").joinpath(template_name).read_text()
    return Template(text).substitute({key: str(value) for key, value in values.items()})


def make_traversable(directory: Path) -> None:
    """Create ``directory`` and let every OS user pass through it and its parents.

    The servers run as the postgres, redis and rabbitmq users, which must reach their data
    directories; only the execute bit is added, never read.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for ancestor in [directory, *directory.parents]:
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            log.info("adding o+x to %s so the service users can reach %s", ancestor, directory)
            ancestor.chmod(mode | stat.S_IXOTH)



def refuse_other_ports(kind: str, directory: Path, running: Sequence[int],
                       asked: Sequence[int] | None) -> None:
    """``chrono services cluster-up KIND --ports``: a cluster already in ``directory`` keeps its
    own ports; asking for others is an error that says what to do, never a silent default."""
    if asked and tuple(asked) != tuple(running):
        raise ServiceStartError(
            f"the {kind} cluster in {directory} listens on {list(running)}, not {list(asked)}: "
            f"run `chrono services cluster-down {kind}` first to start one on other ports")
