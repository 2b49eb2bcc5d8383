"""A RabbitMQ cluster of three (or more) nodes on loopback, beside Chrono's own node.

Each node is a :class:`~localservices.rabbitmq.RabbitMQService` of its own: node name
``chrono-rmq<port>@localhost``, AMQP on ``127.0.0.1:<port>``, Erlang distribution on ``<port> +
RABBITMQ_DIST_PORT_OFFSET`` (25701… for 5701…, away from the shared node's 25672), a data
directory under the cluster's directory, and the rabbitmq OS user, as Chrono's node runs. They
share Erlang's port mapper (epmd, 4369) with the shared node, which is fine: epmd keeps one entry
per node name. They do not share its Erlang cookie: the cluster's cookie is generated, kept in
``<directory>/home/.erlang.cookie``, and the nodes and ``rabbitmqctl`` take that directory as
``HOME``, so no other node (the shared one included) can join or administer them.

The cluster forms by RabbitMQ's classic configuration peer discovery: the first node (the seed)
boots alone; the others boot with it as their only peer and join it on their first boot, all at
once, with no ``stop_app``/``join_cluster``/``start_app`` round. Its user and virtual host are
provisioned as on Chrono's node (definitions on standard input, a hashed password; ``guest``
deleted), with a password generated here and kept in ``<directory>/cluster.json`` (mode 0600).

Quorum queues declared once the cluster formed get a replica on every node (RabbitMQ's default
``quorum_cluster_size`` is 3, :meth:`RabbitMQCluster.queue_members` shows them), so losing one
node of three loses no confirmed message.

Used by ``chrono services cluster-up rabbitmq`` (:func:`main`), which prints the ``BROKER_URL``
Chrono's processes then take, and by the cluster tests (``tests/cluster/rmqcluster_fixtures.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from chronocore.broker_urls import join_broker_urls, rotated
from localservices.base import (
    POLL_INTERVAL_S,
    STARTUP_GRACE_S,
    log,
    log_tail,
    make_traversable,
    pid_exists,
    port_holders,
    refuse_other_ports,
    wait_for_exit,
    write_owned,
)
from localservices.config import Endpoint
from localservices.errors import PortBusyError, ServiceStartError, ServiceStopError
from localservices.rabbitmq import RabbitMQService

DEFAULT_CLUSTER_PORTS = (5701, 5702, 5703)
CLUSTER_USER = "chrono"
CLUSTER_VHOST = "chrono"
STATE_FILE = "cluster.json"
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0


def cluster_node_name(port: int) -> str:
    """The Erlang node name of the cluster's node on AMQP ``port``."""
    return f"chrono-rmq{port}@localhost"


def peer_discovery_config(seed_node: str) -> str:
    """The rabbitmq.conf lines that make a node join ``seed_node`` on its first boot."""
    return (
        "\n# A node of a cluster started by localservices/rabbitmq_cluster.py: on its first\n"
        "# boot it joins the seed node (classic configuration peer discovery).\n"
        "cluster_formation.peer_discovery_backend = classic_config\n"
        f"cluster_formation.classic_config.nodes.1 = {seed_node}\n"
    )


@dataclass(kw_only=True)
class RabbitMQCluster:
    """Three (or more) clustered RabbitMQ nodes in ``directory``, one per AMQP port."""

    directory: Path
    ports: tuple[int, ...] = DEFAULT_CLUSTER_PORTS
    password: str = field(repr=False)
    cookie: str = field(repr=False)
    user: str = CLUSTER_USER
    vhost: str = CLUSTER_VHOST
    os_user: str = "rabbitmq"
    nodes: list[RabbitMQService] = field(init=False, repr=False)
    boot_s: float = field(default=0.0, init=False)  # what the last start took

    def __post_init__(self) -> None:
        if len(self.ports) < 3:
            raise ServiceStartError(
                f"a cluster needs at least 3 nodes to keep a majority when one goes; got ports "
                f"{list(self.ports)}")
        seed = cluster_node_name(self.ports[0])
        self.nodes = [
            RabbitMQService(
                endpoint=Endpoint(host="127.0.0.1", port=port, user=self.user,
                                  password=self.password, namespace=self.vhost),
                data_dir=self.directory / f"node-{port}",
                name=f"rabbitmq node {port}",
                node_name=cluster_node_name(port),
                home=self.home,
                extra_config=peer_discovery_config(seed),
                start_timeout_s=START_TIMEOUT_S,
            )
            for port in self.ports
        ]

    # ---------------------------------------------------------------------- creating, finding

    @classmethod
    def create(cls, directory: Path, *, ports: tuple[int, ...] = DEFAULT_CLUSTER_PORTS
               ) -> RabbitMQCluster:
        """A new cluster in ``directory`` (created), with a generated password and cookie."""
        make_traversable(directory.parent)
        directory.mkdir(mode=0o755, exist_ok=True)
        directory.chmod(0o755)  # the rabbitmq user passes through (a mkdtemp is 0700)
        cluster = cls(directory=directory, ports=tuple(ports),
                      password=secrets.token_urlsafe(24), cookie=secrets.token_hex(32))
        cluster._save()
        return cluster

    @classmethod
    def open(cls, directory: Path) -> RabbitMQCluster | None:
        """The cluster an earlier :meth:`create` left in ``directory``, or None."""
        try:
            state = json.loads((directory / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        return cls(directory=directory, ports=tuple(state["ports"]),
                   password=state["password"], cookie=state["cookie"])

    def _save(self) -> None:
        state = {"ports": list(self.ports), "password": self.password, "cookie": self.cookie}
        write_owned(self.directory / STATE_FILE, json.dumps(state), user="root", mode=0o600)

    @property
    def home(self) -> Path:
        """The nodes' and rabbitmqctl's HOME, which holds the cluster's Erlang cookie."""
        return self.directory / "home"

    # ---------------------------------------------------------------------- what clients take

    def urls(self) -> list[str]:
        """One AMQP URL per node, with the cluster's user, password and virtual host."""
        return [f"amqp://{self.user}:{self.password}@127.0.0.1:{port}/{self.vhost}"
                for port in self.ports]

    def broker_url(self, *, first: int = 0) -> str:
        """``BROKER_URL`` for a Chrono process: every node, node ``first`` first."""
        return join_broker_urls(rotated(self.urls(), first))

    # ---------------------------------------------------------------------- starting

    def start(self) -> float:
        """Start every node that is not running, wait until all run clustered, provision the
        user and virtual host; the seconds it took."""
        started = time.monotonic()
        self._write_cookie()
        seed, *others = self.nodes
        if not seed.running():
            self._launch(seed)
        self._wait_ready(seed)
        for node in others:
            if not node.running():
                self._launch(node)
        for node in others:
            self._wait_ready(node)
        self._wait_clustered()
        seed.provision()
        self.boot_s = time.monotonic() - started
        log.info("rabbitmq cluster of %d nodes up in %.1f s (%s)", len(self.nodes),
                 self.boot_s, ", ".join(n.node_name for n in self.nodes))
        return self.boot_s

    def _write_cookie(self) -> None:
        self.home.mkdir(mode=0o700, exist_ok=True)
        os.chown(self.home, *_ids(self.os_user))
        # Erlang refuses a cookie file that others may read.
        write_owned(self.home / ".erlang.cookie", self.cookie, user=self.os_user, mode=0o400)

    def _launch(self, node: RabbitMQService) -> None:
        for port in node.ports:
            if holders := port_holders(port):
                raise PortBusyError(
                    f"port {port}, needed by {node.name} of the RabbitMQ cluster, is held by pid "
                    f"{holders[0]}; stop it or give the cluster other ports (--ports)")
        node.data_dir.mkdir(mode=0o750, exist_ok=True)
        node.start()

    def _wait_ready(self, node: RabbitMQService) -> None:
        started = time.monotonic()
        while not node.ready():
            elapsed = time.monotonic() - started
            if elapsed > STARTUP_GRACE_S and not node.running():
                raise ServiceStartError(f"{node.name} exited while booting\n"
                                        f"{log_tail(node.log_path)}")
            if elapsed > node.start_timeout_s:
                raise ServiceStartError(f"{node.name} did not boot within "
                                        f"{node.start_timeout_s:.0f} s\n{log_tail(node.log_path)}")
            time.sleep(POLL_INTERVAL_S)

    def running_nodes(self, via: int | None = None) -> list[str]:
        """The node names the cluster reports running, asked of node ``via`` (default: the
        first node that answers)."""
        candidates = [self.nodes[via]] if via is not None else self.live_nodes()
        for node in candidates:
            answer = node.ctl("-q", "eval", "rabbit_nodes:all_running().")
            if answer.returncode == 0:
                return sorted(_erlang_atoms(answer.stdout))
        raise ServiceStartError("no node of the RabbitMQ cluster answers rabbitmqctl")

    def _wait_clustered(self) -> None:
        wanted = sorted(node.node_name for node in self.nodes)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (running := self.running_nodes(via=0)) != wanted:
            if time.monotonic() > deadline:
                raise ServiceStartError(
                    f"the RabbitMQ nodes did not form one cluster: the seed reports {running}, "
                    f"not {wanted}; see the logs in {self.directory}")
            time.sleep(POLL_INTERVAL_S)

    # ---------------------------------------------------------------------- inspecting

    def live_nodes(self) -> list[RabbitMQService]:
        return [node for node in self.nodes if node.pid() is not None]

    def queue_members(self, queue: str) -> dict[str, list[str]]:
        """``{"members": [...], "online": [...], "leader": [...]}`` of a quorum queue."""
        for node in self.live_nodes():
            answer = node.ctl("-q", "list_queues", "-p", self.vhost, "name", "members",
                              "online", "leader", "--formatter", "json")
            if answer.returncode != 0:
                continue
            for row in json.loads(answer.stdout or "[]"):
                if row.get("name") == queue:
                    return {key: _as_list(row.get(key)) for key in ("members", "online",
                                                                     "leader")}
            return {}
        raise ServiceStartError(f"no node of the RabbitMQ cluster lists queue {queue!r}")

    # ---------------------------------------------------------------------- breaking, stopping

    def kill(self, index: int) -> int:
        """SIGKILL node ``index``'s Erlang VM (no shutdown of any kind); its pid."""
        pid = self.nodes[index].pid()
        if pid is None:
            raise ServiceStopError(f"{self.nodes[index].name} is not running")
        os.kill(pid, signal.SIGKILL)
        wait_for_exit(pid, timeout_s=10)
        return pid

    def restart_dead_nodes(self) -> list[str]:
        """Start again every node that is not running (it rejoins the cluster from its data
        directory) and wait until all run clustered; the names of those restarted."""
        dead = [node for node in self.nodes if node.pid() is None]
        for node in dead:
            node.start()
        for node in dead:
            self._wait_ready(node)
        if dead:
            self._wait_clustered()
        return [node.node_name for node in dead]

    def stop(self) -> None:
        """Stop every node: SIGTERM (the VM shuts down cleanly), all at once, then SIGKILL
        past ``STOP_TIMEOUT_S``. A cluster's nodes stop in any order here because it is
        thrown away or restarted whole."""
        pids = [pid for node in self.nodes if (pid := node.pid()) is not None]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for pid in pids:
            if not wait_for_exit(pid, timeout_s=max(0.0, deadline - time.monotonic())):
                log.warning("rabbitmq cluster node (pid %d) ignored SIGTERM; SIGKILL", pid)
                os.kill(pid, signal.SIGKILL)
                wait_for_exit(pid, timeout_s=10)
        if any(pid_exists(pid) for pid in pids):
            raise ServiceStopError(f"a node of the RabbitMQ cluster in {self.directory} did not "
                                   "exit")

    def destroy(self) -> None:
        """Stop every node and delete the cluster's directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def _ids(user: str) -> tuple[int, int]:
    import pwd

    account = pwd.getpwnam(user)
    return account.pw_uid, account.pw_gid


def _erlang_atoms(text: str) -> list[str]:
    """The node names of an Erlang list printed by ``rabbitmqctl eval``
    (``['a@localhost','b@localhost']``)."""
    inner = text.strip().strip("[]").replace("\n", "")
    return [atom.strip().strip("'") for atom in inner.split(",") if atom.strip()]


def _as_list(value: object) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    return [str(value)]



# --------------------------------------------------------------------------- the command


def cluster_directory(data_dir: Path) -> Path:
    """Where ``chrono services cluster-up rabbitmq`` keeps its cluster."""
    return data_dir / "rabbitmq-cluster"


def cluster_up(data_dir: Path, *, ports: tuple[int, ...] | None = None) -> str:
    """Start (or find running) the cluster of ``data_dir``; the ``BROKER_URL`` to give
    Chrono's processes. ``ports`` apply to a new cluster; an existing one keeps its own."""
    directory = cluster_directory(data_dir)
    cluster = RabbitMQCluster.open(directory)
    if cluster is None:
        cluster = RabbitMQCluster.create(directory, ports=ports or DEFAULT_CLUSTER_PORTS)
    else:
        refuse_other_ports("rabbitmq", directory, cluster.ports, ports)
    cluster.start()
    return cluster.broker_url()


def cluster_down(data_dir: Path) -> None:
    """Stop the cluster of ``data_dir`` and delete it (its queues, users and password)."""
    cluster = RabbitMQCluster.open(cluster_directory(data_dir))
    if cluster is None:
        log.info("no RabbitMQ cluster in %s", cluster_directory(data_dir))
        return
    cluster.destroy()
    log.info("stopped the RabbitMQ cluster and deleted %s", cluster.directory)
