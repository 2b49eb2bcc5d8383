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
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

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
)
from localservices.config import Endpoint
from localservices.errors import ServiceStartError, ServiceStopError

LAUNCHER_DIR = Path(__file__).resolve().parents[1] / "search" / "launcher"
MAIN_CLASS = "chrono.search.ChronoSearchNode"
OS_USER = "chrono-search"
# A cold build downloads about 50 MB of jars and Maven plugins into ~/.m2.
MAVEN_BUILD = ("mvn", "-B", "-q", "clean", "package")
BUILD_TIMEOUT_S = 1200.0
BUILD_STAMP = "chrono-build.stamp"
HEAP = "512m"
# The node-to-node transport listens next to HTTP: 9300 for 9200, as in a stock node.
TRANSPORT_PORT_OFFSET = 100
HEALTHY = frozenset({"green", "yellow"})
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


def build_launcher(launcher_dir: Path) -> None:
    """``mvn clean package`` in ``launcher_dir``, then a stamp naming this build.

    ``clean`` first: the dependency plugin only adds jars to ``target/lib``, and a jar left from
    an older build would put two versions of one library on the node's classpath.
    """
    if not (launcher_dir / "pom.xml").exists():
        raise ServiceStartError(f"the search launcher is missing: no {launcher_dir / 'pom.xml'}")
    log.info("building the search launcher (%s in %s)", " ".join(MAVEN_BUILD), launcher_dir)
    started = time.monotonic()
    result = run_command(MAVEN_BUILD, cwd=launcher_dir, timeout_s=BUILD_TIMEOUT_S)
    if result.returncode != 0:
        raise ServiceStartError(
            f"Maven could not build the search launcher in {launcher_dir}:\n{output_tail(result)}"
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

    def _get(self, path: str) -> dict | None:
        """The JSON body of ``GET path``, or None when the node does not answer with one."""
        try:
            with _DIRECT.open(f"http://{self.address}{path}", timeout=PROBE_TIMEOUT_S) as reply:
                return json.load(reply)
        except (OSError, ValueError):  # URLError and HTTPError are OSErrors
            return None

    def ready(self) -> bool:
        pid = self.pid()
        if pid is None or not holds_port(pid, self.endpoint.port):
            return False
        return self._get("/") is not None

    def answers(self) -> bool:
        pid = self.pid()
        if pid is None or not holds_port(pid, self.endpoint.port):
            return False
        health = self._get("/_cluster/health")
        return health is not None and health.get("status") in HEALTHY

    def start(self) -> None:
        if build_is_stale(self.launcher_dir):
            build_launcher(self.launcher_dir)
        for directory in (self.data_dir, self.data_dir / "logs", self.data_dir / "tmp"):
            directory.mkdir(mode=0o750, exist_ok=True)
        install_build(self.launcher_dir, self.install_dir)
        env = {**os.environ, "HOME": str(self.data_dir)}
        ids: dict[str, object] = {}
        if os.geteuid() == 0:
            ensure_os_user(self.os_user)
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
        ]

    def provision(self) -> None:
        """Nothing to create: index templates and data streams are the client's business."""

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
