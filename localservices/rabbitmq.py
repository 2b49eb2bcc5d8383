"""Chrono's RabbitMQ node ``chrono@localhost``, beside (never inside) a system RabbitMQ node.

The node's users are administered with ``rabbitmqctl`` (the Erlang cookie of the rabbitmq user,
no password): ``provision`` gives the user of ``BROKER_URL`` its password (from the credentials
file) and full rights on its virtual host, and deletes ``guest``, which a node creates at its
first boot. All of it applies to a running node; nothing restarts.
"""

from __future__ import annotations

import base64
import hashlib
import json
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
from localservices.config import DEFAULT_RABBITMQ_NODE_NAME, Endpoint
from localservices.errors import ServiceStartError, ServiceStopError

RABBITMQ_BIN_DIR = Path("/usr/lib/rabbitmq/bin")
RABBITMQ_NODE_NAME = DEFAULT_RABBITMQ_NODE_NAME
DEFAULT_USER = "guest"
# Chrono's node must not join the system node's Erlang distribution on 25672.
RABBITMQ_DIST_PORT_OFFSET = 20000
ERLANG_LOOPBACK_ARGS = "-kernel inet_dist_use_interface {127,0,0,1}"


def password_hash(password: str, *, salt: bytes | None = None) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256`` form: base64(salt + SHA-256(salt +
    password)), with a 4-byte salt as RabbitMQ's own hashing uses."""
    salt = os.urandom(4) if salt is None else salt
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


def user_definitions(user: str, password: str, vhost: str) -> dict[str, object]:
    """Definitions (``rabbitmqctl import_definitions``) of ``vhost`` and of ``user``, with
    ``password`` and every right on ``vhost``."""
    return {
        "users": [
            {
                "name": user,
                "password_hash": password_hash(password),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": [],
            }
        ],
        "vhosts": [{"name": vhost}],
        "permissions": [
            {"user": user, "vhost": vhost, "configure": ".*", "write": ".*", "read": ".*"}
        ],
    }


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
    # The directory the node and rabbitmqctl take as HOME, whose .erlang.cookie they share
    # (None: the rabbitmq user's own, as Debian's rabbitmqctl expects); and lines appended to
    # the generated rabbitmq.conf (a cluster's peer discovery).
    home: Path | None = None
    extra_config: str = ""
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
        return self.ready() and self._login(self.endpoint.user, self.endpoint.password)

    def _login(self, user: str, password: str) -> bool:
        """Whether ``user`` with ``password`` may open a connection to the URL's vhost."""
        connection = amqp.Connection(
            host=self.endpoint.address,
            userid=user,
            password=password,
            virtual_host=self.endpoint.namespace,
            connect_timeout=PROBE_TIMEOUT_S,
        )
        try:
            connection.connect()
        except (OSError, amqp.exceptions.AMQPError):
            return False
        with suppress(OSError, amqp.exceptions.AMQPError):
            connection.close()
        return True

    def refuses_anonymous(self) -> bool:
        e = self.endpoint
        attempts = [(DEFAULT_USER, DEFAULT_USER), (e.user, e.password + "-wrong"), (e.user, "")]
        return self.ready() and not any(self._login(*attempt) for attempt in attempts)

    def restart_reason(self) -> str | None:
        return None  # users and passwords change on the running node

    def start(self) -> None:
        d = self.data_dir
        for directory in (d, d / "mnesia", d / "log"):
            directory.mkdir(mode=0o750, exist_ok=True)
        write_owned(
            d / "rabbitmq.conf",
            render_template("rabbitmq.conf", port=self.endpoint.port) + self.extra_config,
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
                    "HOME": str(self.home or account.pw_dir),
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
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl -n NODE ARGS`` as the rabbitmq user."""
        return run_command(
            [str(RABBITMQ_BIN_DIR / "rabbitmqctl"), "-n", self.node_name, *args],
            user=self.os_user,
            cwd=self.data_dir,
            env=self._env(),
            timeout_s=timeout_s,
            input_text=input_text,
            home=self.home,
        )

    def provision(self) -> None:
        e = self.endpoint
        if not (e.user and e.password):
            raise ServiceStartError(
                "BROKER_URL has no user and password and the credentials file none; run "
                "`chrono services up` (it generates them) or give them in BROKER_URL"
            )
        self._check_ctl_reaches_this_node()
        log.info(
            "rabbitmq: vhost %r, user %r with the password of BROKER_URL or the credentials file",
            e.namespace,
            e.user,
        )
        # As definitions on standard input, with the password hashed: `add_user` and
        # `change_password` take it on their command line, which every local user can read in
        # /proc while they run. An import adds the user or replaces its password hash.
        result = self.ctl(
            "import_definitions", "--format", "json",  # no file: standard input
            input_text=json.dumps(user_definitions(e.user, e.password, e.namespace)),
        )
        if result.returncode != 0:
            raise ServiceStartError(f"rabbitmqctl import_definitions failed: {output_tail(result)}")
        users = self._users()
        if DEFAULT_USER in users:
            log.info("rabbitmq: deleting the default user guest")
            self._ctl_checked("delete_user", DEFAULT_USER)

    def _users(self) -> list[str]:
        """The names of the node's users."""
        listed = self.ctl("-q", "list_users")
        if listed.returncode != 0:
            raise ServiceStartError(f"rabbitmqctl list_users failed: {output_tail(listed)}")
        return [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]

    def _check_ctl_reaches_this_node(self) -> None:
        """Refuse to administer a node other than the one of this data directory.

        Erlang's port mapper knows one node per name and host, so a second installation started
        under the same node name never boots, while ``rabbitmqctl -n NAME`` would reach, and
        change, the first installation's node.
        """
        answer = self.ctl("eval", "os:getpid().")
        reached = answer.stdout.strip().strip('"')
        if answer.returncode != 0 or reached != str(self.pid()):
            raise ServiceStartError(
                f"rabbitmqctl -n {self.node_name} reaches OS process {reached or '?'}, not the "
                f"node of {self.data_dir} (pid {self.pid()}): another installation uses that "
                "node name; give this one its own with CHRONO_RABBITMQ_NODE_NAME"
            )

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

