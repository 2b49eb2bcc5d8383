"""Chrono's RabbitMQ node ``chrono@localhost``, beside (never inside) a system RabbitMQ node."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import amqp

from localservices.base import (
    COMMAND_TIMEOUT_S,
    PROBE_TIMEOUT_S,
    chown_tree,
    holds_port,
    log,
    output_tail,
    pid_alive,
    read_pid,
    render_template,
    run_command,
    terminate,
    write_owned,
)
from localservices.config import Endpoint
from localservices.errors import ServiceStartError, ServiceStopError

RABBITMQ_BIN_DIR = Path("/usr/lib/rabbitmq/bin")
RABBITMQ_NODE_NAME = "chrono@localhost"
# Chrono's node must not join the system node's Erlang distribution on 25672.
RABBITMQ_DIST_PORT_OFFSET = 20000
ERLANG_LOOPBACK_ARGS = "-kernel inet_dist_use_interface {127,0,0,1}"


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
        pid = read_pid(self.pid_file)
        return pid if pid_alive(pid, comm=self.process_names) else None

    def running(self) -> bool:
        launched = self._launcher is not None and self._launcher.poll() is None
        return launched or self.pid() is not None

    def ready(self) -> bool:
        # The AMQP listener opens last in RabbitMQ's boot, so an accepting port means booted.
        pid = self.pid()
        return pid is not None and holds_port(pid, self.endpoint.port)

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
        write_owned(
            d / "rabbitmq.conf",
            render_template("rabbitmq.conf", port=self.endpoint.port),
            user=self.os_user,
        )
        write_owned(d / "advanced.config", "[].\n", user=self.os_user)
        write_owned(d / "enabled_plugins", "[].\n", user=self.os_user)
        write_owned(
            d / "rabbitmq-env.conf",
            "# Empty on purpose: shadows /etc/rabbitmq/rabbitmq-env.conf for Chrono's node.\n",
            user=self.os_user,
        )
        chown_tree(d, self.os_user)
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
        return run_command(
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
            raise ServiceStartError(f"rabbitmqctl {args[0]} failed: {output_tail(result)}")

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            log.info("rabbitmq is not running")
            return
        log.info("stopping rabbitmq node %s (rabbitmqctl stop)", self.node_name)
        result = self.ctl("stop", str(self.pid_file), timeout_s=120)
        if result.returncode != 0 and pid_alive(pid, comm=self.process_names):
            log.info("rabbitmqctl stop failed (%s); sending SIGTERM", output_tail(result))
            terminate(pid, first_signal=signal.SIGTERM, what="rabbitmq")
        if pid_alive(pid, comm=self.process_names):
            raise ServiceStopError(f"rabbitmq (pid {pid}) did not exit; see {self.log_path}")

