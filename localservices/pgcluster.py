"""A PostgreSQL primary and a synchronous streaming standby on loopback, for failover.

``chrono services cluster-up postgresql`` (and the cluster tests' fixture) starts two servers of
Debian's PostgreSQL, run as the postgres user like Chrono's own instance
(:class:`~localservices.postgresql.PostgresService`, one per server, each in its own data
directory under one base directory): the primary is made by ``initdb``, the standby by
``pg_basebackup -R`` from it, streaming through a replication slot with a replication role of its
own. Every password is generated. Chrono's processes take :meth:`PostgresPair.database_url`, a
multi-host URL with ``target_session_attrs=read-write``: libpq tries the hosts in turn and keeps
the one that accepts writes, so after :meth:`PostgresPair.promote` they reconnect to the new
primary.

Replication is synchronous where Chrono needs "nothing accepted lost": the primary names the
standby in ``synchronous_standby_names`` and runs ``synchronous_commit = on``, so a commit (a
job's create call) returns only once the standby has flushed its WAL to disk; a primary lost at
any moment leaves the standby with every commit a client saw succeed. ``remote_apply`` would also
wait for the standby to replay it (reads on the standby would see it at once) at the cost of a
replay's latency on every commit, and of commits stalling behind standby queries that hold
replay back; Chrono reads nothing from a standby that must be that fresh, so it takes ``on``
(docs/production.md, "Clusters").

The standby's own configuration names no synchronous standby: once promoted it accepts commits
alone (availability first: a single survivor that waited for a standby it no longer has would
stop the platform) until a new standby is attached.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg import sql

from localservices.base import (
    POLL_INTERVAL_S,
    chown_tree,
    log,
    output_tail,
    refuse_other_ports,
    run_command,
    wait_for_exit,
)
from localservices.config import Endpoint
from localservices.errors import ServiceError, ServiceStartError
from localservices.postgresql import PostgresService

DEFAULT_PORTS = (5501, 5502)
DATABASE = "chrono"
USER = "chrono"
REPLICATION_USER = "chrono_replication"
# The standby's application_name, which synchronous_standby_names and its slot are named after.
STANDBY_NAME = "chrono_standby"
STATE_FILE = "cluster.env"
READY_TIMEOUT_S = 60.0

# Settings of both servers (the template's synchronous_commit = off, a developer box's, is
# replaced: this pair is there to show failover without loss).
COMMON_SETTINGS = {
    "synchronous_commit": "on",
    "fsync": "on",
    "full_page_writes": "on",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "max_replication_slots": "5",
    "hot_standby": "on",
    # Two servers beside the shared one on a 2-core box: modest memory.
    "max_connections": "150",
    "shared_buffers": "64MB",
    "wal_sender_timeout": "10s",
    "wal_receiver_status_interval": "1s",
}
PRIMARY_SETTINGS = {**COMMON_SETTINGS,
                    "synchronous_standby_names": f"'FIRST 1 ({STANDBY_NAME})'"}
STANDBY_SETTINGS = {**COMMON_SETTINGS, "synchronous_standby_names": "''"}


def _password() -> str:
    return secrets.token_urlsafe(24)


@dataclass(kw_only=True)
class PostgresPair:
    """A primary (first port) and its synchronous standby (second port) under ``base_dir``."""

    base_dir: Path
    ports: tuple[int, int] = DEFAULT_PORTS
    password: str = field(default_factory=_password, repr=False)
    replication_password: str = field(default_factory=_password, repr=False)
    nodes: list[PostgresService] = field(init=False)

    def __post_init__(self) -> None:
        self.nodes = [
            PostgresService(
                endpoint=Endpoint(host="127.0.0.1", port=port, user=USER,
                                  password=self.password, namespace=DATABASE),
                data_dir=self.base_dir / f"node{index + 1}",
                name=f"postgresql-node{index + 1}",
                extra_settings=PRIMARY_SETTINGS if index == 0 else STANDBY_SETTINGS,
            )
            for index, port in enumerate(self.ports)
        ]

    # -- state kept for the command (cluster-up twice, then cluster-down) --------------------

    @classmethod
    def load_or_create(cls, base_dir: Path, ports: tuple[int, int] = DEFAULT_PORTS) -> PostgresPair:
        """The pair whose passwords ``base_dir``'s state file keeps, or a new one."""
        state = base_dir / STATE_FILE
        if state.exists():
            values = dict(line.split("=", 1) for line in state.read_text().split())
            return cls(base_dir=base_dir,
                       ports=tuple(int(p) for p in values["PORTS"].split(",")),  # type: ignore[arg-type]
                       password=values["PASSWORD"],
                       replication_password=values["REPLICATION_PASSWORD"])
        return cls(base_dir=base_dir, ports=ports)

    def _save(self) -> None:
        descriptor = os.open(self.base_dir / STATE_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                             0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(f"PORTS={','.join(map(str, self.ports))}\nPASSWORD={self.password}\n"
                       f"REPLICATION_PASSWORD={self.replication_password}\n")

    # -- what clients take ---------------------------------------------------------------------

    def database_url(self, database: str = DATABASE) -> str:
        """The multi-host URL every Chrono process takes: libpq keeps the host that accepts
        writes (``target_session_attrs=read-write``), and gives up on one after 2 s."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.ports)
        return (f"postgresql://{USER}:{quote(self.password, safe='')}@{hosts}/{database}"
                "?target_session_attrs=read-write&connect_timeout=2")

    def node_url(self, node: PostgresService, database: str = DATABASE) -> str:
        """One server's URL (a standby's, for read-only work)."""
        return (f"postgresql://{USER}:{quote(self.password, safe='')}@127.0.0.1:"
                f"{node.endpoint.port}/{database}")

    # -- life cycle ----------------------------------------------------------------------------

    def up(self) -> None:
        """Start both servers: ``initdb`` the primary and ``pg_basebackup`` the standby the
        first time, then wait until the standby streams synchronously. Idempotent."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir.chmod(0o711)  # the postgres user reaches its data directories, no more
        self._save()
        primary, standby = self.nodes
        if not (primary.data_dir / "PG_VERSION").exists():
            # Alone until its standby streams: a commit would wait for a standby not there yet.
            primary.extra_settings = STANDBY_SETTINGS
            primary.start()
            primary.provision()
            self._create_replication_role(primary)
            self._base_backup(standby)
            standby.start()
            primary.extra_settings = PRIMARY_SETTINGS
            primary.provision()  # rewrites its settings and reloads: synchronous from now on
            self.wait_synchronous(primary)
            return
        for node in self.nodes:
            if not node.running():
                node.start()

    def _create_replication_role(self, primary: PostgresService) -> None:
        with primary._admin_connection() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} REPLICATION LOGIN PASSWORD {}").format(
                sql.Identifier(REPLICATION_USER), sql.Literal(self.replication_password)))

    def _base_backup(self, standby: PostgresService) -> None:
        """Copy the primary into the standby's directory; ``-R`` writes its primary_conninfo
        (with the application_name synchronous_standby_names knows) and standby.signal, and
        ``-C -S`` makes the slot that keeps the WAL it has not received yet."""
        primary = self.nodes[0]
        log.info("creating the standby %s from %s (pg_basebackup)", standby.data_dir,
                 primary.address)
        standby.data_dir.mkdir(mode=0o700, exist_ok=True)
        chown_tree(standby.data_dir, standby.os_user)
        conninfo = (f"host=127.0.0.1 port={primary.endpoint.port} user={REPLICATION_USER} "
                    f"application_name={STANDBY_NAME}")
        result = run_command(
            [primary._bin("pg_basebackup"), "-D", str(standby.data_dir), "-d", conninfo,
             "-R", "-X", "stream", "-C", "-S", STANDBY_NAME, "--checkpoint=fast"],
            user=standby.os_user, cwd=standby.data_dir,
            # libpq reads it from the environment, which no other user can see in /proc; -R
            # writes it into the standby's postgresql.auto.conf (mode 0600, postgres's).
            env={"PGPASSWORD": self.replication_password},
        )
        if result.returncode != 0:
            raise ServiceStartError(f"pg_basebackup failed: {output_tail(result)}")
        # The primary's log came along with its files: the standby starts a log of its own.
        (standby.data_dir / "postgresql.log").unlink(missing_ok=True)

    def wait_synchronous(self, primary: PostgresService,
                         timeout_s: float = READY_TIMEOUT_S) -> None:
        """Wait until ``primary`` sees the standby streaming as its synchronous standby."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ("streaming", "sync") in self.replication(primary):
                return
            time.sleep(POLL_INTERVAL_S)
        raise ServiceStartError(
            f"the standby did not stream synchronously from {primary.address} within "
            f"{timeout_s:.0f} s; see {self.nodes[1].log_path}")

    def replication(self, primary: PostgresService) -> list[tuple[str, str]]:
        """``(state, sync_state)`` of each standby connected to ``primary``."""
        with primary._admin_connection() as conn:
            return [tuple(row) for row in conn.execute(  # type: ignore[misc]
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                (STANDBY_NAME,)).fetchall()]

    def in_recovery(self, node: PostgresService) -> bool:
        with node._admin_connection() as conn:
            return bool(conn.execute("SELECT pg_is_in_recovery()").fetchone()[0])

    def primary(self) -> PostgresService:
        """The running server that accepts writes."""
        for node in self.nodes:
            if node.running() and not self.in_recovery(node):
                return node
        raise ServiceError("no server of the pair accepts writes")

    def stop_node(self, node: PostgresService, *, mode: str = "immediate") -> None:
        """``pg_ctl stop -m mode`` (``immediate``: as a crash; ``kill``: SIGKILL the postmaster,
        whose backends then exit as they notice)."""
        if mode == "kill":
            pid = node.pid()
            if pid:
                os.kill(pid, signal.SIGKILL)
                wait_for_exit(pid, timeout_s=10)
            return
        result = run_command(
            [node._bin("pg_ctl"), "stop", "-D", str(node.data_dir), "-m", mode, "-w", "-t", "30"],
            user=node.os_user, cwd=node.data_dir, timeout_s=40)
        if result.returncode != 0 and node.running():
            raise ServiceError(f"pg_ctl could not stop {node.name}: {output_tail(result)}")

    def promote(self, node: PostgresService) -> None:
        """``pg_ctl promote``: the standby ends recovery and accepts writes."""
        log.info("promoting %s on %s", node.name, node.address)
        result = run_command(
            [node._bin("pg_ctl"), "promote", "-D", str(node.data_dir), "-w", "-t", "30"],
            user=node.os_user, cwd=node.data_dir, timeout_s=40)
        if result.returncode != 0:
            raise ServiceError(f"pg_ctl could not promote {node.name}: {output_tail(result)}")

    def down(self, *, remove: bool = False) -> None:
        """Stop both servers (immediately: their data is thrown away or kept as it is);
        ``remove`` deletes the base directory."""
        for node in self.nodes:
            if node.running():
                self.stop_node(node, mode="immediate" if remove else "fast")
        if remove:
            shutil.rmtree(self.base_dir, ignore_errors=True)


def temporary_pair(ports: tuple[int, int]) -> PostgresPair:
    """A pair in a new temporary directory (the tests'; :meth:`PostgresPair.down` with
    ``remove`` deletes it)."""
    return PostgresPair(base_dir=Path(tempfile.mkdtemp(prefix="chrono-pgpair-")), ports=ports)


def parse_ports(text: str) -> tuple[int, int]:
    """``--ports A,B`` of ``cluster-up postgresql``: the primary's and the standby's."""
    try:
        ports = tuple(int(part) for part in text.split(","))
    except ValueError:
        ports = ()
    if len(ports) != 2 or len(set(ports)) != 2 or any(not 1024 <= p <= 65535 for p in ports):
        raise argparse.ArgumentTypeError(
            f"--ports {text!r}: a PostgreSQL pair takes two different ports, 1024 to 65535 "
            "(the primary's, then the standby's), e.g. 5501,5502")
    return ports  # type: ignore[return-value]


def cluster_directory(data_dir: Path) -> Path:
    return data_dir / "pgcluster"


def cluster_up(data_dir: Path, *, ports: tuple[int, ...] | None = None) -> str:
    """Start (or find running) the pair of ``data_dir``; the ``DATABASE_URL`` to give Chrono's
    processes. ``ports`` apply to a new pair; an existing one keeps its own."""
    directory = cluster_directory(data_dir)
    pair = PostgresPair.load_or_create(directory, tuple(ports or DEFAULT_PORTS))  # type: ignore[arg-type]
    refuse_other_ports("postgresql", directory, pair.ports, ports)
    pair.up()
    return pair.database_url()


def cluster_down(data_dir: Path) -> None:
    """Stop the pair of ``data_dir`` and delete it (its databases and passwords)."""
    directory = cluster_directory(data_dir)
    if not (directory / STATE_FILE).exists():
        log.info("no PostgreSQL pair in %s", directory)
        return
    PostgresPair.load_or_create(directory).down(remove=True)
    log.info("stopped the PostgreSQL pair and deleted %s", directory)


def wait_for_primary(pair: PostgresPair, timeout_s: float = READY_TIMEOUT_S) -> PostgresService:
    """The node that accepts writes, once one does (after a promotion)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return pair.primary()
        except (ServiceError, psycopg.Error):
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_INTERVAL_S)
