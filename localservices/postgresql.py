"""Chrono's PostgreSQL cluster: initdb on first start, pg_ctl to start and stop, run as postgres.

Its configuration is ``service_conf/postgresql.conf``, included from the cluster's own
``postgresql.conf``, and ``service_conf/pg_hba.conf`` (a password for every TCP login), both
rewritten on every ``up``. ``provision`` sets the role's password to the one of
``DATABASE_URL`` (from the credentials file) over the Unix socket, and reloads the cluster when
``pg_hba.conf`` changed: an existing cluster gets its credentials without a restart.
"""

from __future__ import annotations

import glob
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql

from localservices.base import (
    PROBE_TIMEOUT_S,
    chown_tree,
    holds_port,
    log,
    log_tail,
    output_tail,
    pid_alive,
    read_pid,
    render_template,
    run_command,
    write_owned,
)
from localservices.config import Endpoint
from localservices.errors import ServiceStartError, ServiceStopError

POSTGRES_BIN_GLOB = "/usr/lib/postgresql/*/bin"
# Under Debian's conventional home of system users that have none.
NO_PASSFILE = "/nonexistent/.pgpass"


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
    # Settings written after the template's (the last value of a setting wins in
    # postgresql.conf): a replicated pair's own (localservices.pgcluster).
    extra_settings: Mapping[str, str] = field(default_factory=dict)

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
        pid = read_pid(self.data_dir / "postmaster.pid")
        return pid if pid_alive(pid, comm=self.process_names) else None

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
        if postmaster is None or not holds_port(postmaster, self.endpoint.port):
            return False
        return self._tcp_login(self.endpoint.user, self.endpoint.password) is None

    def _tcp_login(self, user: str, password: str) -> str | None:
        """Log in over TCP as ``user``; None when it worked, else the refusal.

        ``passfile`` names no file, so that a ~/.pgpass cannot stand in for a missing password
        (/dev/null would do too, but libpq warns that it is not a plain file).
        """
        e = self.endpoint
        try:
            with psycopg.connect(
                host=e.host,
                port=e.port,
                user=user,
                password=password,
                dbname=e.namespace,
                passfile=NO_PASSFILE,
                connect_timeout=int(PROBE_TIMEOUT_S),
            ) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as error:
            return str(error).strip() or type(error).__name__
        return None

    def refuses_anonymous(self) -> bool:
        e = self.endpoint
        attempts = {(e.user, ""), (e.user, e.password + "-wrong"), (e.user, "chrono"),
                    ("postgres", ""), ("postgres", "postgres")} - {(e.user, e.password)}
        return all(self._tcp_login(user, password) is not None for user, password in attempts)

    def restart_reason(self) -> str | None:
        return None  # passwords and pg_hba.conf change with a reload

    def start(self) -> None:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._write_config()
        log.info("starting postgresql (pg_ctl, log %s)", self.log_path)
        result = run_command(
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
                f"pg_ctl could not start postgresql: {output_tail(result)}\n"
                f"see {self.log_path}\n{log_tail(self.log_path)}"
            )

    def _initdb(self) -> None:
        log.info("creating the postgresql cluster in %s (initdb)", self.data_dir)
        self.data_dir.mkdir(mode=0o700, exist_ok=True)
        chown_tree(self.data_dir, self.os_user)
        # Local (socket) logins are trusted: the socket sits in this 0700 directory, so only root
        # and postgres reach it. TCP logins, the only kind Chrono's code makes, need a password.
        result = run_command(
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
            raise ServiceStartError(f"initdb failed in {self.data_dir}: {output_tail(result)}")
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# Chrono's settings (generated on every `up`)\n"
                "include_if_exists = 'chrono.conf'\n"
            )

    def _write_config(self) -> bool:
        """Write chrono.conf and pg_hba.conf; True when either changed."""
        conf = render_template("postgresql.conf", port=self.endpoint.port, socket_dir=self.data_dir)
        if self.extra_settings:
            conf += "\n# This server's own settings (they win over the ones above)\n" + "".join(
                f"{name} = {value}\n" for name, value in self.extra_settings.items())
        conf_changed = write_owned(self.data_dir / "chrono.conf", conf, user=self.os_user)
        hba_changed = write_owned(
            self.data_dir / "pg_hba.conf",
            render_template("pg_hba.conf"),
            user=self.os_user,
            mode=0o600,
        )
        return conf_changed or hba_changed

    def provision(self) -> None:
        if not self.endpoint.password:
            raise ServiceStartError(
                "DATABASE_URL has no password and the credentials file none for its user; "
                "run `chrono services up` (it generates one) or give one in DATABASE_URL"
            )
        try:
            if self._write_config():
                # pg_hba.conf (a password for every TCP login) and password_encryption apply
                # at a reload; settings that need a restart wait for the next start.
                log.info("postgresql: configuration rewritten; reloading")
                with self._admin_connection() as conn:
                    conn.execute("SELECT pg_reload_conf()")
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
                "%s postgresql role %s (LOGIN CREATEDB, the password of DATABASE_URL or the "
                "credentials file)",
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
        result = run_command(
            [self._bin("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60"],
            user=self.os_user,
            cwd=self.data_dir,
            timeout_s=70,
        )
        if result.returncode != 0 and self.running():
            raise ServiceStopError(
                f"pg_ctl could not stop postgresql: {output_tail(result)}; see {self.log_path}"
            )

