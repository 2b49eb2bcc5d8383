"""Install, start, stop and report Chrono's own PostgreSQL, Redis and RabbitMQ instances.

``python -m chronoadmin.services up|down|status`` (wired as ``chrono services …``) gives a
developer box, CI and the end-to-end tests the three servers Chrono is built on, each as Chrono's
own instance: its own data directory under ``CHRONO_DATA_DIR`` (default ``/var/lib/chrono``), its
own generated configuration (templates in ``chronoadmin/service_conf/``), listening on loopback
only, at the ports and with the credentials of ``DATABASE_URL``, ``REDIS_URL`` and ``BROKER_URL``.

A server of the same kind that is not Chrono's (a Debian system instance started by apt, say) and
holds one of those ports is stopped, with a log line, because Chrono needs its configured instance.
``up`` is idempotent: an instance that already answers is left alone.

Each server is a :class:`Service`; :func:`registered_services` lists them in start order, so one
more (an OpenSearch node started from a Java launcher) is one more class and one more entry.
The module imports no Django code: it runs before settings and migrations exist.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import pwd
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from string import Template
from typing import Protocol
from urllib.parse import SplitResult, unquote, urlsplit

import amqp
import psycopg
import redis
from psycopg import sql
from redis.backoff import NoBackoff
from redis.retry import Retry

# The URL defaults live in one place; chronoadmin.config imports nothing from Django.
from chronoadmin.config import DEFAULT_BROKER_URL, DEFAULT_DATABASE_URL, DEFAULT_REDIS_URL

log = logging.getLogger("chronoadmin.services")

DEFAULT_DATA_DIR = "/var/lib/chrono"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})

POLL_INTERVAL_S = 0.25
# A daemon writes its pid file a moment after its launcher returns; until then "not running"
# means "not yet", not "died".
STARTUP_GRACE_S = 3.0
PROBE_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 120.0
APT_TIMEOUT_S = 1200.0
EVICTION_TIMEOUT_S = 30.0
LOG_TAIL_LINES = 8

POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
APT_LISTS_GLOB = "/var/lib/apt/lists/*_Packages*"
POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"
RABBITMQ_BIN_DIR = Path("/usr/lib/rabbitmq/bin")
RABBITMQ_NODE_NAME = "chrono@localhost"
# Chrono's node must not join the system node's Erlang distribution on 25672.
RABBITMQ_DIST_PORT_OFFSET = 20000
ERLANG_LOOPBACK_ARGS = "-kernel inet_dist_use_interface {127,0,0,1}"


# --------------------------------------------------------------------------------------- errors


class ServiceError(Exception):
    """Base class of every error ``chronoadmin.services`` raises."""


class ServiceConfigError(ServiceError, ValueError):
    """Raised when a URL or ``CHRONO_DATA_DIR`` cannot describe a local Chrono instance."""


class ServiceInstallError(ServiceError):
    """Raised when apt-get cannot install a Debian package a service needs."""


class PortBusyError(ServiceError):
    """Raised when a process that is not a server of the expected kind holds a needed port."""


class ServiceStartError(ServiceError):
    """Raised when a service does not start or answer in time; the message names its log file."""


class ServiceStopError(ServiceError):
    """Raised when a running service does not stop; the message names its log file."""


# --------------------------------------------------------------------------------------- config


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a client reaches one server, parsed from its URL.

    ``namespace`` is the database name (PostgreSQL), the database index (Redis) or the virtual
    host (RabbitMQ).
    """

    host: str
    port: int
    user: str
    password: str
    namespace: str

    @property
    def address(self) -> str:
        """``host:port``, as printed by ``status``."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, kw_only=True)
class ServicesConfig:
    """Everything the service manager reads from the environment, read once."""

    data_dir: Path
    database: Endpoint
    redis: Endpoint
    broker: Endpoint

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServicesConfig:
        """Read ``CHRONO_DATA_DIR``, ``DATABASE_URL``, ``REDIS_URL`` and ``BROKER_URL``."""
        env = os.environ if environ is None else environ
        data_dir = Path(env.get("CHRONO_DATA_DIR") or DEFAULT_DATA_DIR).absolute()
        return cls(
            data_dir=data_dir,
            database=parse_database_url(env.get("DATABASE_URL") or DEFAULT_DATABASE_URL),
            redis=parse_redis_url(env.get("REDIS_URL") or DEFAULT_REDIS_URL),
            broker=parse_broker_url(env.get("BROKER_URL") or DEFAULT_BROKER_URL),
        )


def _split_local_url(
    url: str, *, variable: str, schemes: Sequence[str], default_port: int
) -> tuple[SplitResult, int]:
    """Split ``url`` and check it names a loopback host Chrono can serve."""
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ServiceConfigError(f"{variable}={url!r}: the scheme must be one of {list(schemes)}")
    if parts.hostname not in LOOPBACK_HOSTS:
        raise ServiceConfigError(
            f"{variable} points at {parts.hostname!r}, but chrono services runs local instances "
            f"on 127.0.0.1 only; unset {variable} or point it at 127.0.0.1"
        )
    try:
        port = parts.port or default_port
    except ValueError:
        raise ServiceConfigError(f"{variable}={url!r}: the port is not a number") from None
    return parts, port


def parse_database_url(url: str, *, variable: str = "DATABASE_URL") -> Endpoint:
    """Parse ``postgresql://user:password@127.0.0.1:5432/dbname``."""
    parts, port = _split_local_url(
        url, variable=variable, schemes=("postgresql", "postgres"), default_port=5432
    )
    database = unquote(parts.path.lstrip("/"))
    if not (parts.username and parts.password and database):
        raise ServiceConfigError(
            f"{variable} needs a user, a password and a database name, e.g. "
            f"postgresql://chrono:SECRET@127.0.0.1:{port}/chrono (TCP logins use passwords)"
        )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username),
        password=unquote(parts.password),
        namespace=database,
    )


def parse_redis_url(url: str, *, variable: str = "REDIS_URL") -> Endpoint:
    """Parse ``redis://[:password@]127.0.0.1:6379/0`` (Chrono's Redis has no ACL users)."""
    parts, port = _split_local_url(url, variable=variable, schemes=("redis",), default_port=6379)
    if parts.username not in (None, "", "default"):
        raise ServiceConfigError(
            f"{variable} names the user {parts.username!r}; Chrono's Redis has only the default "
            f"user, so give the password alone: redis://:SECRET@127.0.0.1:{port}/0"
        )
    index = parts.path.lstrip("/") or "0"
    if not index.isdigit() or int(index) > 15:
        raise ServiceConfigError(f"{variable}: the database index must be 0..15, not {index!r}")
    return Endpoint(
        host=parts.hostname,
        port=port,
        user="default",
        password=unquote(parts.password or ""),
        namespace=index,
    )


def parse_broker_url(url: str, *, variable: str = "BROKER_URL") -> Endpoint:
    """Parse ``amqp://user:password@127.0.0.1:5672/vhost``; ``//`` is the vhost ``/``."""
    parts, port = _split_local_url(
        url, variable=variable, schemes=("amqp", "pyamqp"), default_port=5672
    )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
        namespace=unquote(parts.path[1:]) or "/",
    )


# ------------------------------------------------------------------------- processes and ports


def _comm(pid: int) -> str:
    """The program name of ``pid`` (``postgres``, ``redis-server``, ``beam.smp``), or ""."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _exists(pid: int) -> bool:
    """Whether ``pid`` still runs.

    A zombie does not count: daemons are re-parented to PID 1, and in a container PID 1 may reap
    them seconds later, while their /proc entry lingers.
    """
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _pid_alive(pid: int | None, *, comm: Sequence[str]) -> bool:
    """Whether ``pid`` runs and is one of the programs ``comm`` (guards against reused pids)."""
    return bool(pid) and _exists(pid) and _comm(pid) in comm


def _read_pid(path: Path) -> int | None:
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


def _holds_port(pid: int, port: int) -> bool:
    """Whether ``pid`` listens on ``port``; True when this user may not look (non-root status)."""
    if not os.access(f"/proc/{pid}/fd", os.R_OK):
        return True
    return bool(_socket_inodes_of(pid) & _listening_inodes(port))


def _cmdline(pid: int, *, max_chars: int = 120) -> str:
    """The command line of ``pid``, shortened for a log line (a beam.smp one runs to 600)."""
    with suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        return raw if len(raw) <= max_chars else raw[: max_chars - 1] + "…"
    return "?"


def _wait_for_exit(pid: int, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _exists(pid) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_S)
    return not _exists(pid)


def _terminate(pid: int, *, first_signal: int, what: str) -> None:
    """Send ``first_signal``, then SIGKILL if ``pid`` is still there after a grace period."""
    log.info("sending %s to %s (pid %d)", signal.Signals(first_signal).name, what, pid)
    with suppress(ProcessLookupError):
        os.kill(pid, first_signal)
    if not _wait_for_exit(pid, timeout_s=EVICTION_TIMEOUT_S):
        log.warning("%s (pid %d) ignored it; sending SIGKILL", what, pid)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_for_exit(pid, timeout_s=5.0)


def _run(
    argv: Sequence[str],
    *,
    user: str | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = COMMAND_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (as ``user`` when given, the way ``runuser -u`` would) and capture output."""
    full_env = {**os.environ, **(env or {})}
    ids: dict[str, object] = {}
    if user is not None:
        account = pwd.getpwnam(user)
        full_env.update(HOME=account.pw_dir, USER=user, LOGNAME=user)
        ids = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    try:
        return subprocess.run(
            list(argv),
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
            check=False,
            **ids,
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(f"`{' '.join(argv)}` did not finish within {timeout_s:.0f} s") from None
    except OSError as error:
        raise ServiceError(f"could not run {argv[0]}: {error}") from None


def _output_tail(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stdout + result.stderr).strip().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _log_tail(path: Path) -> str:
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


def _own(path: Path, user: str) -> None:
    """Give ``path`` and everything under it to ``user``."""
    account = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in dirs + files)]:
            os.lchown(name, account.pw_uid, account.pw_gid)


def _write_owned(path: Path, text: str, *, user: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)
    account = pwd.getpwnam(user)
    os.chown(path, account.pw_uid, account.pw_gid)


def _render(template_name: str, **values: object) -> str:
    """Fill in one of the ``chronoadmin/service_conf`` templates."""
    text = resources.files("chronoadmin.service_conf").joinpath(template_name).read_text()
    return Template(text).substitute({key: str(value) for key, value in values.items()})


def _make_traversable(directory: Path) -> None:
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


# ------------------------------------------------------------------------------------- services


class Service(Protocol):
    """One server Chrono runs its own instance of.

    ``packages`` are the Debian packages it needs; ``debian_service`` is the init script of the
    distribution's own instance and ``process_names`` the program names of any server of this
    kind, so that one holding Chrono's ports can be told apart from an unrelated program and
    stopped (``stop_signal`` is its graceful-shutdown signal).
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

    def start(self) -> None:
        """Prepare the data directory and launch the server; waiting is the caller's job."""

    def provision(self) -> None:
        """Create the users, databases or virtual hosts the URL names, if missing."""

    def stop(self) -> None:
        """Stop Chrono's instance cleanly; a no-op when it is not running."""


@dataclass(kw_only=True)
class PostgresService:
    """Chrono's PostgreSQL cluster in ``$CHRONO_DATA_DIR/postgres``, run as the postgres user."""

    endpoint: Endpoint
    data_dir: Path
    name: str = "postgresql"
    url_variable: str = "DATABASE_URL"
    packages: tuple[str, ...] = ("postgresql",)
    debian_service: str = "postgresql"
    process_names: tuple[str, ...] = ("postgres",)
    stop_signal: int = signal.SIGINT  # "fast" shutdown; SIGTERM would wait for every client
    start_timeout_s: float = 60.0
    os_user: str = "postgres"

    @property
    def address(self) -> str:
        return self.endpoint.address

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.endpoint.port,)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "postgresql.log"

    def _bin(self, program: str) -> str:
        versions = sorted(glob.glob(POSTGRES_BIN_GLOB), key=lambda p: int(Path(p).parent.name))
        if not versions:
            raise ServiceStartError("no PostgreSQL server under /usr/lib/postgresql; run `up`")
        return str(Path(versions[-1]) / program)

    def pid(self) -> int | None:
        pid = _read_pid(self.data_dir / "postmaster.pid")
        return pid if _pid_alive(pid, comm=self.process_names) else None

    def running(self) -> bool:
        return self.pid() is not None

    def _admin_connection(self) -> psycopg.Connection:
        return psycopg.connect(
            host=str(self.data_dir),
            port=self.endpoint.port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=int(PROBE_TIMEOUT_S),
        )

    def ready(self) -> bool:
        try:
            with self._admin_connection() as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def answers(self) -> bool:
        postmaster = self.pid()
        if postmaster is None or not _holds_port(postmaster, self.endpoint.port):
            return False
        e = self.endpoint
        try:
            with psycopg.connect(
                host=e.host,
                port=e.port,
                user=e.user,
                password=e.password,
                dbname=e.namespace,
                connect_timeout=int(PROBE_TIMEOUT_S),
            ) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def start(self) -> None:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        conf = _render("postgresql.conf", port=self.endpoint.port, socket_dir=self.data_dir)
        _write_owned(self.data_dir / "chrono.conf", conf, user=self.os_user)
        log.info("starting postgresql (pg_ctl, log %s)", self.log_path)
        result = _run(
            [
                self._bin("pg_ctl"),
                "start",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                str(int(self.start_timeout_s)),
            ],
            user=self.os_user,
            cwd=self.data_dir,
            timeout_s=self.start_timeout_s + 10,
        )
        if result.returncode != 0:
            raise ServiceStartError(
                f"pg_ctl could not start postgresql: {_output_tail(result)}\n"
                f"see {self.log_path}\n{_log_tail(self.log_path)}"
            )

    def _initdb(self) -> None:
        log.info("creating the postgresql cluster in %s (initdb)", self.data_dir)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        _own(self.data_dir, self.os_user)
        # Local (socket) logins are trusted: the socket sits in this 0700 directory, so only root
        # and postgres reach it. TCP logins, the only kind Chrono's code makes, need a password.
        result = _run(
            [
                self._bin("initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            user=self.os_user,
            cwd=self.data_dir,
        )
        if result.returncode != 0:
            raise ServiceStartError(f"initdb failed in {self.data_dir}: {_output_tail(result)}")
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# Chrono's settings (generated on every `up`)\n"
                "include_if_exists = 'chrono.conf'\n"
            )

    def provision(self) -> None:
        try:
            self._create_role_and_database()
        except psycopg.Error as error:
            raise ServiceStartError(
                f"could not create the role or database of DATABASE_URL: {error}"
            ) from None

    def _create_role_and_database(self) -> None:
        e = self.endpoint
        role, database = sql.Identifier(e.user), sql.Identifier(e.namespace)
        with self._admin_connection() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (e.user,)).fetchone()
            verb = "ALTER" if exists else "CREATE"
            log.info(
                "%s postgresql role %s (LOGIN CREATEDB, password from DATABASE_URL)",
                "updating" if exists else "creating",
                e.user,
            )
            # CREATEDB lets Django's test runner create its test databases.
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN CREATEDB PASSWORD {}").format(
                    role, sql.Literal(e.password)
                )
            )
            if not conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (e.namespace,)
            ).fetchone():
                log.info("creating postgresql database %s owned by %s", e.namespace, e.user)
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(database, role))

    def stop(self) -> None:
        if not self.running():
            log.info("postgresql is not running")
            return
        log.info("stopping postgresql (pg_ctl stop -m fast)")
        result = _run(
            [self._bin("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60"],
            user=self.os_user,
            cwd=self.data_dir,
            timeout_s=70,
        )
        if result.returncode != 0 and self.running():
            raise ServiceStopError(
                f"pg_ctl could not stop postgresql: {_output_tail(result)}; see {self.log_path}"
            )


@dataclass(kw_only=True)
class RedisService:
    """Chrono's Redis in ``$CHRONO_DATA_DIR/redis`` (AOF, fsync every second), run as redis."""

    endpoint: Endpoint
    data_dir: Path
    name: str = "redis"
    url_variable: str = "REDIS_URL"
    packages: tuple[str, ...] = ("redis-server",)
    debian_service: str = "redis-server"
    process_names: tuple[str, ...] = ("redis-server",)
    stop_signal: int = signal.SIGTERM  # Redis flushes the AOF and exits on SIGTERM
    start_timeout_s: float = 30.0
    os_user: str = "redis"

    @property
    def address(self) -> str:
        return self.endpoint.address

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.endpoint.port,)

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "redis.pid"

    def pid(self) -> int | None:
        pid = _read_pid(self.pid_file)
        return pid if _pid_alive(pid, comm=self.process_names) else None

    def running(self) -> bool:
        return self.pid() is not None

    def client(self) -> redis.Redis:
        """A client for Chrono's instance with the URL's credentials.

        It never retries: a probe must answer at once, and redis-py's default retries turn the
        connection that SHUTDOWN closes into seconds of back-off.
        """
        e = self.endpoint
        return redis.Redis(
            host=e.host,
            port=e.port,
            password=e.password or None,
            db=int(e.namespace),
            socket_timeout=PROBE_TIMEOUT_S,
            socket_connect_timeout=PROBE_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )

    def ready(self) -> bool:
        return self.answers()

    def answers(self) -> bool:
        pid = self.pid()
        if pid is None or not _holds_port(pid, self.endpoint.port):
            return False
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        self.data_dir.mkdir(mode=0o750, exist_ok=True)
        password = self.endpoint.password.replace("\\", "\\\\").replace('"', '\\"')
        password_line = f'requirepass "{password}"' if password else "# REDIS_URL has no password"
        conf = self.data_dir / "redis.conf"
        _write_owned(
            conf,
            _render(
                "redis.conf",
                port=self.endpoint.port,
                pid_file=self.pid_file,
                log_file=self.log_path,
                data_dir=self.data_dir,
                password_line=password_line,
            ),
            user=self.os_user,
            mode=0o640,
        )
        _own(self.data_dir, self.os_user)
        log.info("starting redis (config %s, log %s)", conf, self.log_path)
        result = _run(["redis-server", str(conf)], user=self.os_user, cwd=self.data_dir)
        if result.returncode != 0:
            raise ServiceStartError(
                f"redis-server did not start: {_output_tail(result)}\n"
                f"see {self.log_path}\n{_log_tail(self.log_path)}"
            )

    def provision(self) -> None:
        """Nothing to create: the URL's database index always exists."""

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            log.info("redis is not running")
            return
        log.info("stopping redis (SHUTDOWN)")
        try:
            with self.client() as client:
                client.shutdown()
        except redis.RedisError as error:
            log.info("redis refused SHUTDOWN (%s); sending SIGTERM instead", error)
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        if not _wait_for_exit(pid, timeout_s=60):
            raise ServiceStopError(f"redis (pid {pid}) did not exit; see {self.log_path}")


@dataclass(kw_only=True)
class RabbitMQService:
    """Chrono's RabbitMQ node ``chrono@localhost`` in ``$CHRONO_DATA_DIR/rabbitmq``.

    The node runs as the rabbitmq user, whose home holds the Erlang cookie, so Debian's own
    ``rabbitmqctl -n chrono@localhost …`` (which switches to that user) talks to it as well.
    """

    endpoint: Endpoint
    data_dir: Path
    name: str = "rabbitmq"
    url_variable: str = "BROKER_URL"
    packages: tuple[str, ...] = ("rabbitmq-server",)
    debian_service: str = "rabbitmq-server"
    process_names: tuple[str, ...] = ("beam.smp",)
    stop_signal: int = signal.SIGTERM  # the Erlang VM shuts down gracefully on SIGTERM
    start_timeout_s: float = 180.0
    os_user: str = "rabbitmq"
    node_name: str = RABBITMQ_NODE_NAME
    _launcher: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return self.endpoint.address

    @property
    def dist_port(self) -> int:
        return self.endpoint.port + RABBITMQ_DIST_PORT_OFFSET

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.endpoint.port, self.dist_port)

    @property
    def log_path(self) -> Path:
        # The node log (chrono@localhost.log) and startup.log, which catches what the node
        # prints before its logger runs, such as an unparsable rabbitmq.conf.
        return self.data_dir / "log"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "rabbitmq.pid"

    def _env(self) -> dict[str, str]:
        d = self.data_dir
        return {
            "RABBITMQ_NODENAME": self.node_name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.endpoint.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": ERLANG_LOOPBACK_ARGS,
            "RABBITMQ_CTL_ERL_ARGS": ERLANG_LOOPBACK_ARGS,
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(self.pid_file),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
        }

    def pid(self) -> int | None:
        pid = _read_pid(self.pid_file)
        return pid if _pid_alive(pid, comm=self.process_names) else None

    def running(self) -> bool:
        launched = self._launcher is not None and self._launcher.poll() is None
        return launched or self.pid() is not None

    def ready(self) -> bool:
        # The AMQP listener opens last in RabbitMQ's boot, so an accepting port means booted.
        pid = self.pid()
        return pid is not None and _holds_port(pid, self.endpoint.port)

    def answers(self) -> bool:
        if not self.ready():
            return False
        e = self.endpoint
        connection = amqp.Connection(
            host=e.address,
            userid=e.user,
            password=e.password,
            virtual_host=e.namespace,
            connect_timeout=PROBE_TIMEOUT_S,
        )
        try:
            connection.connect()
        except (OSError, amqp.exceptions.AMQPError):
            return False
        with suppress(OSError, amqp.exceptions.AMQPError):
            connection.close()
        return True

    def start(self) -> None:
        d = self.data_dir
        for directory in (d, d / "mnesia", d / "log"):
            directory.mkdir(mode=0o750, exist_ok=True)
        _write_owned(
            d / "rabbitmq.conf",
            _render("rabbitmq.conf", port=self.endpoint.port),
            user=self.os_user,
        )
        _write_owned(d / "advanced.config", "[].\n", user=self.os_user)
        _write_owned(d / "enabled_plugins", "[].\n", user=self.os_user)
        _write_owned(
            d / "rabbitmq-env.conf",
            "# Empty on purpose: shadows /etc/rabbitmq/rabbitmq-env.conf for Chrono's node.\n",
            user=self.os_user,
        )
        _own(d, self.os_user)
        account = pwd.getpwnam(self.os_user)
        log.info("starting rabbitmq node %s (log %s)", self.node_name, self.log_path)
        with open(d / "log" / "startup.log", "ab") as startup_log:
            self._launcher = subprocess.Popen(
                [str(RABBITMQ_BIN_DIR / "rabbitmq-server")],
                cwd=d,
                stdin=subprocess.DEVNULL,
                stdout=startup_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={
                    **os.environ,
                    **self._env(),
                    "HOME": account.pw_dir,
                    "USER": self.os_user,
                    "LOGNAME": self.os_user,
                },
                user=account.pw_uid,
                group=account.pw_gid,
                extra_groups=[],
            )

    def ctl(
        self,
        *args: str,
        timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl -n chrono@localhost ARGS`` as the rabbitmq user."""
        return _run(
            [str(RABBITMQ_BIN_DIR / "rabbitmqctl"), "-n", self.node_name, *args],
            user=self.os_user,
            cwd=self.data_dir,
            env=self._env(),
            timeout_s=timeout_s,
        )

    def provision(self) -> None:
        e = self.endpoint
        if (e.user, e.password, e.namespace) == ("guest", "guest", "/"):
            return  # the node creates guest/guest with full rights on "/" at first boot
        log.info("making sure rabbitmq has vhost %r and user %r", e.namespace, e.user)
        if e.namespace not in self.ctl("-q", "list_vhosts", "name").stdout.split():
            self._ctl_checked("add_vhost", e.namespace)
        users = [
            line.split()[0]
            for line in self.ctl("-q", "list_users").stdout.splitlines()
            if line.strip()
        ]
        if e.user in users:
            self._ctl_checked("change_password", e.user, e.password)
        else:
            self._ctl_checked("add_user", e.user, e.password)
        self._ctl_checked("set_permissions", "-p", e.namespace, e.user, ".*", ".*", ".*")

    def _ctl_checked(self, *args: str) -> None:
        result = self.ctl(*args)
        if result.returncode != 0:
            raise ServiceStartError(f"rabbitmqctl {args[0]} failed: {_output_tail(result)}")

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            log.info("rabbitmq is not running")
            return
        log.info("stopping rabbitmq node %s (rabbitmqctl stop)", self.node_name)
        result = self.ctl("stop", str(self.pid_file), timeout_s=120)
        if result.returncode != 0 and _pid_alive(pid, comm=self.process_names):
            log.info("rabbitmqctl stop failed (%s); sending SIGTERM", _output_tail(result))
            _terminate(pid, first_signal=signal.SIGTERM, what="rabbitmq")
        if _pid_alive(pid, comm=self.process_names):
            raise ServiceStopError(f"rabbitmq (pid {pid}) did not exit; see {self.log_path}")


def registered_services(config: ServicesConfig) -> list[Service]:
    """Chrono's services in start order (``down`` stops them in reverse)."""
    return [
        PostgresService(endpoint=config.database, data_dir=config.data_dir / "postgres"),
        RedisService(endpoint=config.redis, data_dir=config.data_dir / "redis"),
        RabbitMQService(endpoint=config.broker, data_dir=config.data_dir / "rabbitmq"),
    ]


# --------------------------------------------------------------------------------- installation


def _missing_packages(packages: Sequence[str]) -> list[str]:
    result = _run(["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *packages])
    installed = {
        line.split()[0] for line in result.stdout.splitlines() if line.split()[1:2] == ["ii"]
    }
    return [package for package in packages if package not in installed]


@contextmanager
def _init_scripts_blocked() -> Iterator[None]:
    """Keep packages' postinst scripts from starting system instances while apt installs them.

    An existing policy-rc.d (Docker images ship one) is left as it is.
    """
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text(
        "#!/bin/sh\n# Written by chronoadmin.services during apt-get install\nexit 101\n"
    )
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    log.info("running apt-get %s", " ".join(args))
    return _run(
        ["apt-get", *args], env={"DEBIAN_FRONTEND": "noninteractive"}, timeout_s=APT_TIMEOUT_S
    )


def ensure_packages(packages: Sequence[str]) -> None:
    """Install the Debian ``packages`` that are missing; ``apt-get update`` only if needed."""
    missing = _missing_packages(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        raise ServiceInstallError(f"{', '.join(missing)} missing; run `chrono services up` as root")
    install = ("install", "-y", "--no-install-recommends", *missing)
    with _init_scripts_blocked():
        if not glob.glob(APT_LISTS_GLOB):
            _apt_get("update")
        result = _apt_get(*install)
        if result.returncode != 0:
            _apt_get("update")
            result = _apt_get(*install)
    if result.returncode != 0:
        raise ServiceInstallError(
            f"apt-get could not install {', '.join(missing)}:\n{_output_tail(result)}"
        )


# ---------------------------------------------------------------------------------- up and down


def free_ports(service: Service) -> None:
    """Stop servers of ``service``'s kind that are not Chrono's and hold its ports.

    Anything else on those ports is left alone and reported, since it is not ours to kill.
    """
    for port in service.ports:
        holders = port_holders(port)
        foreign = [pid for pid in holders if _comm(pid) not in service.process_names]
        if foreign:
            raise PortBusyError(
                f"port {port}, needed by {service.name}, is held by pid {foreign[0]} "
                f"({_cmdline(foreign[0])}); stop it or choose another port in "
                f"{service.url_variable}"
            )
        if holders:
            _evict(service, port, holders)


def _evict(service: Service, port: int, holders: list[int]) -> None:
    log.warning(
        "port %d is held by a %s that is not Chrono's (pid %s: %s); stopping it with "
        "`service %s stop`",
        port,
        service.name,
        holders[0],
        _cmdline(holders[0]),
        service.debian_service,
    )
    with suppress(ServiceError):
        _run(["service", service.debian_service, "stop"], timeout_s=EVICTION_TIMEOUT_S * 2)
    for pid in port_holders(port):
        _terminate(pid, first_signal=service.stop_signal, what=f"the other {service.name}")
    if port_holders(port):
        raise PortBusyError(
            f"port {port} is still held after stopping the other "
            f"{service.name}; free it by hand or change {service.url_variable}"
        )


def _wait_until(
    service: Service, probe: Callable[[], bool], *, waiting_for: str, hint: str = ""
) -> None:
    """Poll ``probe`` until it holds; fail fast when the process dies, else on timeout."""
    started = time.monotonic()
    while not probe():
        elapsed = time.monotonic() - started
        died = elapsed > STARTUP_GRACE_S and not service.running()
        if died or elapsed > service.start_timeout_s:
            what = "exited" if died else f"did not answer within {service.start_timeout_s:.0f} s"
            raise ServiceStartError(
                f"{service.name} {what} while waiting for {waiting_for} on {service.address}; "
                f"see its log {service.log_path}{hint}\n{_log_tail(service.log_path)}"
            )
        time.sleep(POLL_INTERVAL_S)


def bring_up(service: Service) -> None:
    """Start ``service`` unless Chrono's instance already answers, then wait until it does."""
    if service.answers():
        log.info("%s already answers on %s", service.name, service.address)
        return
    was_running = service.running()
    if not was_running:
        free_ports(service)
        service.start()
    log.info("waiting for %s on %s", service.name, service.address)
    _wait_until(service, service.ready, waiting_for="the server")
    service.provision()
    hint = ""
    if was_running:
        hint = (
            f" (it was already running: if {service.url_variable} changed since it started, "
            "run `chrono services down` and `up` again)"
        )
    _wait_until(service, service.answers, waiting_for=service.url_variable, hint=hint)
    log.info("%s is up on %s", service.name, service.address)


def up(*, config: ServicesConfig | None = None) -> None:
    """Install what is missing and start every service that does not answer yet."""
    config = config or ServicesConfig.from_env()
    services = registered_services(config)
    if all(service.answers() for service in services):
        log.info("all services already answer")
        return
    ensure_packages([package for service in services for package in service.packages])
    _make_traversable(config.data_dir)
    for service in services:
        bring_up(service)


def down(*, config: ServicesConfig | None = None) -> None:
    """Stop every service, last started first; those already stopped are skipped."""
    for service in reversed(registered_services(config or ServicesConfig.from_env())):
        service.stop()


def status(*, config: ServicesConfig | None = None) -> dict[str, bool]:
    """Print one line per service and return whether each answers."""
    answers = {}
    for service in registered_services(config or ServicesConfig.from_env()):
        answers[service.name] = service.answers()
        state = "up" if answers[service.name] else "down"
        print(f"{service.name:<12}{state:<6}{service.address}")
    return answers


def main(argv: list[str] | None = None) -> int:
    """``python -m chronoadmin.services up|down|status``; exit 1 on error or a service down."""
    parser = argparse.ArgumentParser(prog="chrono services", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s services: %(message)s", datefmt="%H:%M:%S"
    )
    try:
        if args.command == "status":
            return 0 if all(status().values()) else 1
        (up if args.command == "up" else down)()
    except ServiceError as error:
        log.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
