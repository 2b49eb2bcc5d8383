"""Chrono's search engine: one OpenSearch 2.19 node, started from the project's own Java launcher.

The Elasticsearch server cannot be fetched from the package registries Chrono's machines reach,
but OpenSearch's jars resolve from Maven Central, so ``search/launcher`` is a small Maven project
whose main starts an ``org.opensearch.node.Node`` with the Netty4 HTTP transport, analysis-common
and lang-painless on its classpath (see its ``ChronoSearchNode.java``).

``start`` builds the launcher with Maven when its build is missing or older than ``pom.xml`` or
any source, copies the build into the data directory, and starts the JVM in the background. The
copy means a rebuild never swaps jars under a running node, and the node's user needs no access
to the source tree. As root, the node runs as the ``chrono-search`` system user (created when
missing), like the other servers run as theirs: OpenSearch refuses root in its own start script,
since a node runs scripts and plugins with its user's rights.

Credentials: the launcher's ``ChronoAuthPlugin`` asks every HTTP request for basic
authentication as a user of its users file (``$CHRONO_DATA_DIR/search/http-users``: the user of
``SEARCH_URL`` with a salted SHA-256 of its password, mode 0600, the node's user's), and its
transport port serves no peer. The node reads the file again when it changes, so ``provision``
changes the password of a running node; a node an older Chrono started has no users file and
must restart (``restart_reason``). Why not OpenSearch's security plugin: see the plugin's
Javadoc (mandatory transport TLS, a security index and its admin tool, forty more jars).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from chronocore.progress import phase_progress
from localservices.base import (
    PROBE_TIMEOUT_S,
    chown_tree,
    command_line,
    holds_port,
    log,
    output_tail,
    pid_alive,
    read_pid,
    run_command,
    terminate,
    write_owned,
)
from localservices.config import Endpoint
from localservices.errors import ServiceStartError, ServiceStopError
from localservices.maven_progress import MavenProgress
from localservices.streamed import run_streamed

LAUNCHER_DIR = Path(__file__).resolve().parents[1] / "search" / "launcher"
MAIN_CLASS = "chrono.search.ChronoSearchNode"
OS_USER = "chrono-search"
# A cold build downloads about 50 MB of jars and Maven plugins into ~/.m2. Not quiet (-q):
# its lines of plugin executions and downloads drive the progress display.
MAVEN_BUILD = ("mvn", "-B", "clean", "package")
BUILD_TIMEOUT_S = 1200.0
BUILD_STAMP = "chrono-build.stamp"
HEAP = "512m"
# The node-to-node transport listens next to HTTP: 9300 for 9200, as in a stock node.
TRANSPORT_PORT_OFFSET = 100
HEALTHY = frozenset({"green", "yellow"})
USERS_FILE = "http-users"
SALT_BYTES = 16
# Neither an HTTP proxy from the environment nor anything else stands between a probe and the
# node on loopback.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------------------------- the build


def launcher_sources(launcher_dir: Path) -> list[Path]:
    """The files a build of the launcher depends on: its pom and everything under ``src``."""
    sources = [launcher_dir / "pom.xml"]
    sources.extend(path for path in (launcher_dir / "src").rglob("*") if path.is_file())
    return sources


def build_is_stale(launcher_dir: Path) -> bool:
    """Whether the launcher's build is missing or older than one of its sources."""
    stamp = launcher_dir / "target" / BUILD_STAMP
    if not stamp.exists() or not (launcher_dir / "target" / "lib").is_dir():
        return True
    built_ns = stamp.stat().st_mtime_ns
    return any(path.stat().st_mtime_ns > built_ns for path in launcher_sources(launcher_dir))


def build_launcher(launcher_dir: Path, *, progress_drawn: bool = True) -> None:
    """``mvn clean package`` in ``launcher_dir``, then a stamp naming this build. Maven's
    phases are drawn on a terminal unless not ``progress_drawn``, else logged
    (:mod:`localservices.maven_progress`).

    ``clean`` first: the dependency plugin only adds jars to ``target/lib``, and a jar left from
    an older build would put two versions of one library on the node's classpath.
    """
    if not (launcher_dir / "pom.xml").exists():
        raise ServiceStartError(f"the search launcher is missing: no {launcher_dir / 'pom.xml'}")
    log.info("building the search launcher (%s in %s)", " ".join(MAVEN_BUILD), launcher_dir)
    started = time.monotonic()
    with phase_progress("mvn package", plain=lambda line: log.info("%s", line),
                        enabled=progress_drawn) as display:
        progress = MavenProgress(display)
        result = run_streamed(MAVEN_BUILD, cwd=launcher_dir, timeout_s=BUILD_TIMEOUT_S,
                              on_output=progress.output_line)
    if result.returncode != 0:
        raise ServiceStartError(
            f"Maven could not build the search launcher in {launcher_dir}:\n"
            f"{progress.failure() or output_tail(result)}"
        )
    (launcher_dir / "target" / BUILD_STAMP).write_text(f"{time.time_ns()}\n")
    log.info("built the search launcher in %.1f s", time.monotonic() - started)


def install_build(launcher_dir: Path, install_dir: Path) -> None:
    """Copy the launcher's classes and jars to ``install_dir`` unless this build is there."""
    stamp = launcher_dir / "target" / BUILD_STAMP
    installed = install_dir / BUILD_STAMP
    if installed.exists() and installed.read_text() == stamp.read_text():
        return
    log.info("installing the search launcher build in %s", install_dir)
    shutil.rmtree(install_dir, ignore_errors=True)
    install_dir.mkdir(parents=True)
    for part in ("classes", "lib"):
        shutil.copytree(launcher_dir / "target" / part, install_dir / part)
    shutil.copy2(stamp, installed)  # last: a half-done copy is never taken for a whole one


def users_file_line(user: str, password: str, *, salt: bytes | None = None) -> str:
    """One line of the node's users file: ``USER:sha256:SALT_HEX:DIGEST_HEX`` with DIGEST =
    SHA-256(SALT + password), as ``UsersFile.java`` reads it."""
    salt = os.urandom(SALT_BYTES) if salt is None else salt
    return f"{user}:sha256:{salt.hex()}:{hashlib.sha256(salt + password.encode()).hexdigest()}"


def users_file_admits(text: str, user: str, password: str) -> bool:
    """Whether a users file's text lets ``user`` in with ``password``."""
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 4 and parts[0] == user and parts[1] == "sha256":
            try:
                salt = bytes.fromhex(parts[2])
            except ValueError:
                return False
            return users_file_line(user, password, salt=salt) == line.strip()
    return False


def ensure_os_user(user: str) -> None:
    """Create the system user ``user`` (and its group) unless it exists."""
    try:
        pwd.getpwnam(user)
        return
    except KeyError:
        pass
    log.info("creating the system user %s for the search node", user)
    result = run_command(
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "Chrono search node",
            user,
        ]
    )
    if result.returncode != 0:
        raise ServiceStartError(f"useradd could not create {user}: {output_tail(result)}")


# -------------------------------------------------------------------------------- the service


@dataclass(kw_only=True)
class SearchService:
    """Chrono's OpenSearch node in ``$CHRONO_DATA_DIR/search``, on ``SEARCH_URL``.

    There is no Debian package of the engine, so there is no system instance to evict either:
    whatever else holds its ports is reported, never stopped.
    """

    endpoint: Endpoint
    data_dir: Path
    name: str = "search"
    url_variable: str = "SEARCH_URL"
    debian_service: str = ""
    process_names: tuple[str, ...] = ("java",)
    stop_signal: int = signal.SIGTERM  # the launcher's shutdown hook closes the node
    start_timeout_s: float = 120.0
    os_user: str = OS_USER
    launcher_dir: Path = LAUNCHER_DIR
    # Whether the launcher's Maven build draws its progress on a terminal (`--no-progress`).
    progress_drawn: bool = True
    _launcher: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def packages(self) -> tuple[str, ...]:
        """Debian's Maven and JDK, but only when ``mvn`` or ``java`` is not on the PATH."""
        if shutil.which("mvn") and shutil.which("java"):
            return ()
        return ("maven", "openjdk-17-jdk-headless")

    @property
    def address(self) -> str:
        return self.endpoint.address

    @property
    def transport_port(self) -> int:
        return self.endpoint.port + TRANSPORT_PORT_OFFSET

    @property
    def ports(self) -> tuple[int, ...]:
        return (self.endpoint.port, self.transport_port)

    @property
    def log_path(self) -> Path:
        # chrono-search.log (the node's log4j log) and stdout.log, which catches what the JVM
        # prints before logging runs, such as a missing class.
        return self.data_dir / "logs"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "chrono-search.pid"

    @property
    def install_dir(self) -> Path:
        return self.data_dir / "launcher"

    def pid(self) -> int | None:
        pid = read_pid(self.pid_file)
        if not pid_alive(pid, comm=self.process_names):
            return None
        # Every JVM is "java": the main class tells Chrono's node from any other.
        return pid if MAIN_CLASS in command_line(pid, max_chars=100_000) else None

    def running(self) -> bool:
        launched = self._launcher is not None and self._launcher.poll() is None
        return launched or self.pid() is not None

    @property
    def users_file(self) -> Path:
        return self.data_dir / USERS_FILE

    def _request(self, path: str, *, password: str | None) -> tuple[int, dict | None]:
        """``GET path`` as the URL's user with ``password`` (None: no credentials): the status
        and the JSON body, or ``(0, None)`` when the node does not answer."""
        request = urllib.request.Request(f"http://{self.address}{path}")
        if password is not None:
            token = base64.b64encode(f"{self.endpoint.user}:{password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with _DIRECT.open(request, timeout=PROBE_TIMEOUT_S) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as error:
            error.close()
            return error.code, None
        except (OSError, ValueError):  # URLError is an OSError
            return 0, None

    def _listening(self) -> bool:
        pid = self.pid()
        return pid is not None and holds_port(pid, self.endpoint.port)

    def ready(self) -> bool:
        """Up, whether or not it takes the URL's password yet (``provision`` sets it)."""
        return self._listening() and self._request("/", password=None)[0] in (200, 401)

    def answers(self) -> bool:
        if not self._listening():
            return False
        status, health = self._request("/_cluster/health", password=self.endpoint.password)
        return status == 200 and health is not None and health.get("status") in HEALTHY

    def refuses_anonymous(self) -> bool:
        if not self._listening():
            return False
        wrong = self.endpoint.password + "-wrong"
        return all(self._request("/", password=p)[0] == 401 for p in (None, wrong))

    def restart_reason(self) -> str | None:
        if self._listening() and self._request("/", password=None)[0] == 200:
            return "it answers without credentials (an older Chrono started it with no users file)"
        return None

    def _node_user(self) -> str:
        """The user the node runs as: its own as root, else whoever runs ``up``."""
        return self.os_user if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name

    def _write_users_file(self) -> bool:
        """Give the node the URL's user and password; False when its file already admits them
        (left as it is, so the node reads nothing new)."""
        e = self.endpoint
        if not (e.user and e.password):
            raise ServiceStartError(
                "SEARCH_URL has no user and password and the credentials file none; run "
                "`chrono services up` (it generates them) or give them in SEARCH_URL"
            )
        with suppress(OSError):
            if users_file_admits(self.users_file.read_text(), e.user, e.password):
                return False
        line = users_file_line(e.user, e.password)
        text = f"# Written by `chrono services up` from SEARCH_URL's user; see search.py.\n{line}\n"
        return write_owned(self.users_file, text, user=self._node_user(), mode=0o600)

    def start(self) -> None:
        if build_is_stale(self.launcher_dir):
            build_launcher(self.launcher_dir, progress_drawn=self.progress_drawn)
        for directory in (self.data_dir, self.data_dir / "logs", self.data_dir / "tmp"):
            directory.mkdir(mode=0o750, exist_ok=True)
        install_build(self.launcher_dir, self.install_dir)
        if os.geteuid() == 0:
            ensure_os_user(self.os_user)
        self._write_users_file()
        env = {**os.environ, "HOME": str(self.data_dir)}
        ids: dict[str, object] = {}
        if os.geteuid() == 0:
            chown_tree(self.data_dir, self.os_user)
            account = pwd.getpwnam(self.os_user)
            env.update(USER=self.os_user, LOGNAME=self.os_user)
            ids = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        log.info("starting the search node (log %s)", self.log_path / "chrono-search.log")
        with open(self.log_path / "stdout.log", "ab") as stdout_log:
            self._launcher = subprocess.Popen(
                self._java_command(),
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=stdout_log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=env,
                **ids,
            )
        self.pid_file.write_text(f"{self._launcher.pid}\n")

    def _java_command(self) -> list[str]:
        d = self.data_dir
        classpath = f"{self.install_dir / 'classes'}:{self.install_dir / 'lib'}/*"
        return [
            shutil.which("java") or "java",
            f"-Xms{HEAP}",
            f"-Xmx{HEAP}",
            "-XX:+UseG1GC",
            # A node out of heap is dead weight: exit, so `status` says down and `up` restarts it.
            "-XX:+ExitOnOutOfMemoryError",
            f"-XX:ErrorFile={d / 'logs' / 'hs_err_pid%p.log'}",
            "-XX:-OmitStackTraceInFastThrow",
            f"-Djava.io.tmpdir={d / 'tmp'}",
            "-Dfile.encoding=UTF-8",
            "-Djava.awt.headless=true",
            # Plain IPv4 sockets on 127.0.0.1, not IPv6 ones mapping it (::ffff:127.0.0.1).
            "-Djava.net.preferIPv4Stack=true",
            "-cp",
            classpath,
            MAIN_CLASS,
            "--data-dir",
            str(d),
            "--http-port",
            str(self.endpoint.port),
            "--transport-port",
            str(self.transport_port),
            "--users-file",
            str(self.users_file),
        ]

    def provision(self) -> None:
        """Give the node the URL's user and password (it reads its users file again within a
        second); index templates and data streams are the client's business."""
        if self._write_users_file():
            log.info("search: users file %s written for the user of SEARCH_URL", self.users_file)

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            log.info("search is not running")
            return
        log.info("stopping the search node (SIGTERM)")
        terminate(pid, first_signal=self.stop_signal, what="the search node")
        if pid_alive(pid, comm=self.process_names):
            raise ServiceStopError(f"the search node (pid {pid}) did not exit; see {self.log_path}")
        self.pid_file.unlink(missing_ok=True)
