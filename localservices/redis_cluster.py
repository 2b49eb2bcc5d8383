"""A Redis Cluster on loopback: Debian's ``redis-server`` in cluster mode, three primaries with a
replica each, for the cluster tests (``tests/cluster``), ``chrono services cluster-up redis``
and the benchmarks run against a cluster.

Every node lives in ``<directory>/<port>/`` (its configuration from
``service_conf/redis-cluster.conf``: AOF, ``noeviction``, a generated password as ``requirepass``
and ``masterauth``, the given ``cluster-node-timeout``), runs as the ``redis`` user like Chrono's
own Redis, and listens on 127.0.0.1 at its port (the cluster bus at port + 10000). The slots are
assigned by ``redis-cli --cluster create … --cluster-replicas 1``; :meth:`LocalRedisCluster.start`
returns once every node says ``cluster_state:ok`` and every primary has its replicas in sync.

The cluster's state (ports, password, node timeout) is kept in ``<directory>/cluster.env``
(mode 0600) so that a later command finds and stops it. Nothing here touches Chrono's own
Redis or any other server: ports held by anything are refused, never taken over.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from localservices.base import (
    PROBE_TIMEOUT_S,
    chown_tree,
    log,
    log_tail,
    make_traversable,
    output_tail,
    pid_alive,
    port_holders,
    read_pid,
    refuse_other_ports,
    render_template,
    run_command,
    terminate,
    write_owned,
)
from localservices.errors import PortBusyError, ServiceConfigError, ServiceStartError

HOST = "127.0.0.1"
DEFAULT_PORTS = tuple(range(7101, 7107))
DEFAULT_NODE_TIMEOUT_MS = 2_000
BUS_PORT_OFFSET = 10_000
START_TIMEOUT_S = 60.0
STATE_FILE = "cluster.env"
SLOTS = 16_384


@dataclass(kw_only=True)
class LocalRedisCluster:
    """The nodes of one loopback Redis Cluster, by port. ``replicas`` per primary: the first
    ``len(ports) / (replicas + 1)`` ports become the primaries when the cluster is created."""

    directory: Path
    password: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)
    ports: tuple[int, ...] = DEFAULT_PORTS
    replicas: int = 1
    node_timeout_ms: int = DEFAULT_NODE_TIMEOUT_MS
    os_user: str = "redis"

    def __post_init__(self) -> None:
        primaries, extra = divmod(len(self.ports), self.replicas + 1)
        if primaries < 3 or extra:
            raise ServiceConfigError(
                f"a Redis Cluster needs at least 3 primaries: {len(self.ports)} ports cannot be "
                f"split into primaries with {self.replicas} replica(s) each")
        if any(not 1024 <= port <= 65_535 - BUS_PORT_OFFSET for port in self.ports):
            raise ServiceConfigError(
                f"ports {self.ports}: every port must be 1024 to {65_535 - BUS_PORT_OFFSET} "
                f"(the cluster bus listens at port + {BUS_PORT_OFFSET})")

    # -- where things are --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """What Chrono's processes take as ``REDIS_URL`` (with ``CHRONO_REDIS_CLUSTER=true``):
        one node; the client finds the others."""
        return self.url_of_nodes(self.ports[:1])

    def url_of_nodes(self, ports: Sequence[int] | None = None) -> str:
        """``REDIS_URL`` naming several nodes (default: every node), each tried in turn by a
        client that starts (``chronocore.redis_client.cluster_startup``)."""
        nodes = ",".join(f"{HOST}:{port}" for port in ports or self.ports)
        return f"redis://:{quote(self.password, safe='')}@{nodes}/0"

    @property
    def startup_nodes(self) -> tuple[str, ...]:
        return tuple(f"{HOST}:{port}" for port in self.ports)

    def node_dir(self, port: int) -> Path:
        return self.directory / str(port)

    def log_path(self, port: int) -> Path:
        return self.node_dir(port) / "redis.log"

    def pid(self, port: int) -> int | None:
        pid = read_pid(self.node_dir(port) / "redis.pid")
        return pid if pid_alive(pid, comm=("redis-server",)) else None

    def node(self, port: int) -> redis.Redis:
        """A plain client of one node (no retries: a probe answers at once or not at all)."""
        return redis.Redis(host=HOST, port=port, password=self.password,
                           socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S,
                           retry=Retry(NoBackoff(), 0))

    # -- state file --------------------------------------------------------------------------

    def save_state(self) -> None:
        state = {"ports": list(self.ports), "password": self.password,
                 "replicas": self.replicas, "node_timeout_ms": self.node_timeout_ms}
        path = self.directory / STATE_FILE
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as file:
            json.dump(state, file)

    @classmethod
    def from_state(cls, directory: Path) -> LocalRedisCluster | None:
        """The cluster a former ``start`` left in ``directory``, or None when there is none."""
        try:
            state = json.loads((directory / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        return cls(directory=directory, password=state["password"],
                   ports=tuple(state["ports"]), replicas=state["replicas"],
                   node_timeout_ms=state["node_timeout_ms"])

    # -- start and stop ----------------------------------------------------------------------

    def start(self, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start every node, create the cluster if its slots are not assigned yet, and wait
        until it serves every slot with every replica in sync."""
        self._refuse_busy_ports()
        make_traversable(self.directory)
        self.directory.chmod(0o750)
        account = pwd.getpwnam(self.os_user)
        os.chown(self.directory, account.pw_uid, account.pw_gid)
        self.save_state()
        for port in self.ports:
            if self.pid(port) is None:
                self._start_node(port)
        self._wait(lambda: all(self._answers(port) for port in self.ports), timeout_s,
                   "every node answering")
        if not self._slots_assigned():
            self._create()
        self.wait_healthy(timeout_s)
        log.info("redis cluster up: %s primaries, %s", len(self.primaries()),
                 ", ".join(self.startup_nodes))

    def _refuse_busy_ports(self) -> None:
        for port in self.ports:
            ours = self.pid(port)
            for wanted in (port, port + BUS_PORT_OFFSET):
                strangers = [pid for pid in port_holders(wanted) if pid != ours]
                if strangers:
                    raise PortBusyError(
                        f"port {wanted} is held by pid(s) {strangers}: choose other ports for "
                        "the Redis Cluster (--ports)")

    def _start_node(self, port: int) -> None:
        node_dir = self.node_dir(port)
        node_dir.mkdir(mode=0o750, parents=True, exist_ok=True)
        conf = node_dir / "redis.conf"
        write_owned(conf, render_template(
            "redis-cluster.conf", port=port, pid_file=node_dir / "redis.pid",
            log_file=self.log_path(port), data_dir=node_dir,
            node_timeout_ms=self.node_timeout_ms, password=self.password,
        ), user=self.os_user, mode=0o640)
        # This node's directory only: the running nodes rewrite their AOF files meanwhile.
        chown_tree(node_dir, self.os_user)
        result = run_command(["redis-server", str(conf)], user=self.os_user, cwd=node_dir)
        if result.returncode != 0:
            raise ServiceStartError(f"redis-server on port {port} did not start: "
                                    f"{output_tail(result)}\n{log_tail(self.log_path(port))}")

    def _answers(self, port: int) -> bool:
        try:
            with self.node(port) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False

    def _slots_assigned(self) -> bool:
        with self.node(self.ports[0]) as client:
            return int(client.cluster("INFO").get("cluster_slots_assigned", 0)) == SLOTS

    def _create(self) -> None:
        """``redis-cli --cluster create``; the password goes in the environment, never on a
        command line every local user can read in /proc."""
        log.info("creating the redis cluster on %s", ", ".join(self.startup_nodes))
        result = run_command(
            ["redis-cli", "--cluster", "create", *self.startup_nodes,
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            env={"REDISCLI_AUTH": self.password},
        )
        if result.returncode != 0:
            raise ServiceStartError(f"redis-cli --cluster create failed: {output_tail(result)}")

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Return once :meth:`healthy`; :class:`ServiceStartError` with the nodes' log tails
        after ``timeout_s``."""
        self._wait(self.healthy, timeout_s, "cluster_state:ok with every replica in sync")

    def _wait(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.2)
        logs = "\n".join(log_tail(self.log_path(port)) for port in self.ports)
        raise ServiceStartError(f"redis cluster: no {what} within {timeout_s:.0f} s\n{logs}")

    def stop(self) -> None:
        """Stop every node (SIGTERM: each flushes its AOF and exits)."""
        for port in self.ports:
            pid = self.pid(port)
            if pid is not None:
                terminate(pid, first_signal=signal.SIGTERM, what=f"redis cluster node {port}")

    def remove(self) -> None:
        """Stop every node and delete the directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- what the cluster looks like -----------------------------------------------------------

    def topology(self, *, ask: Sequence[int] | None = None) -> dict[int, dict[str, object]]:
        """``{port: {"id", "role" ("primary"/"replica"), "primary" (port or None), "failed",
        "slots"}}`` as the first live node of ``ask`` (default: every port) sees it."""
        for port in ask or self.ports:
            try:
                with self.node(port) as client:
                    # Two words, so that redis-py leaves the reply as text (it parses
                    # "CLUSTER NODES" into a dict keyed by address, losing the order).
                    text = client.execute_command("CLUSTER", "NODES")
            except redis.RedisError:
                continue
            return parse_cluster_nodes(text.decode() if isinstance(text, bytes) else text)
        return {}

    def primaries(self) -> list[int]:
        """Ports of the live primaries that serve slots."""
        return sorted(port for port, node in self.topology().items()
                      if node["role"] == "primary" and node["slots"] and not node["failed"])

    def replica_of(self, primary: int) -> int | None:
        return next((port for port, node in self.topology().items()
                     if node["primary"] == primary and not node["failed"]), None)

    def healthy(self) -> bool:
        """Every live node says ``cluster_state:ok``, every slot is served, and each of
        ``replicas`` × primaries replicas has its link to its primary up."""
        live = [port for port in self.ports if self.pid(port) is not None]
        try:
            for port in live:
                with self.node(port) as client:
                    info = client.cluster("INFO")
                    if info.get("cluster_state") != "ok" or \
                            int(info.get("cluster_slots_ok", 0)) != SLOTS:
                        return False
                    role = client.info("replication")
                    if role.get("role") == "slave" and role.get("master_link_status") != "up":
                        return False
        except redis.RedisError:
            return False
        topology = self.topology(ask=live)
        primaries = [p for p, n in topology.items() if n["role"] == "primary" and n["slots"]]
        in_sync = [p for p, n in topology.items() if n["role"] == "replica" and not n["failed"]
                   and n["primary"] in primaries]
        return len(primaries) * self.replicas <= len(in_sync)

    def kill(self, port: int, signum: int = signal.SIGKILL) -> int:
        """Send ``signum`` to the node on ``port`` (SIGKILL: a crash); returns its pid."""
        pid = self.pid(port)
        if pid is None:
            raise ServiceStartError(f"no redis cluster node runs on port {port}")
        os.kill(pid, signum)
        return pid

    def restart_node(self, port: int) -> None:
        """Start a stopped or killed node again (it rejoins from its nodes.conf)."""
        if self.pid(port) is None:
            with suppress(OSError):
                (self.node_dir(port) / "redis.pid").unlink()
            self._start_node(port)


def parse_cluster_nodes(text: str) -> dict[int, dict[str, object]]:
    """``CLUSTER NODES`` as ``{port: {"id", "role", "primary", "failed", "slots"}}``."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    port_of = {row[0]: int(row[1].split("@")[0].rsplit(":", 1)[1]) for row in rows}
    nodes: dict[int, dict[str, object]] = {}
    for row in rows:
        flags = row[2].split(",")
        nodes[port_of[row[0]]] = {
            "id": row[0],
            "role": "primary" if "master" in flags else "replica",
            "primary": port_of.get(row[3]),
            "failed": "fail" in flags or "fail?" in flags,
            "slots": row[8:],
        }
    return nodes


# -- `chrono services cluster-up|cluster-down redis` ----------------------------------------------


def cluster_directory(data_dir: Path) -> Path:
    """Where ``chrono services cluster-up redis`` keeps its cluster."""
    return data_dir / "redis-cluster"


def cluster_up(data_dir: Path, *, ports: tuple[int, ...] | None = None) -> str:
    """Start (or find running) the cluster of ``data_dir``, print ``CHRONO_REDIS_CLUSTER=true``
    and return the ``REDIS_URL`` Chrono's processes take (``chrono services cluster-up redis``
    prints it). A cluster already there keeps its ports and password."""
    directory = cluster_directory(data_dir)
    cluster = LocalRedisCluster.from_state(directory)
    if cluster is None:
        cluster = LocalRedisCluster(directory=directory, ports=ports or DEFAULT_PORTS)
    else:
        refuse_other_ports("redis", directory, cluster.ports, ports)
    cluster.start()
    print("CHRONO_REDIS_CLUSTER=true")
    return cluster.url_of_nodes()  # every node, as docs/production.md advises


def cluster_down(data_dir: Path) -> None:
    """Stop the cluster of ``data_dir`` and delete its directory (its data is a test's)."""
    cluster = LocalRedisCluster.from_state(cluster_directory(data_dir))
    if cluster is None:
        log.info("no redis cluster in %s", cluster_directory(data_dir))
        return
    cluster.remove()
    log.info("redis cluster stopped and %s removed", cluster.directory)
