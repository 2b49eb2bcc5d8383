"""Chrono's Redis: an append-only-file instance started from ``service_conf/redis.conf``."""

from __future__ import annotations

import os
import signal
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

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
    wait_for_exit,
    write_owned,
)
from localservices.config import Endpoint
from localservices.errors import ServiceStartError, ServiceStopError


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
        pid = read_pid(self.pid_file)
        return pid if pid_alive(pid, comm=self.process_names) else None

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
        if pid is None or not holds_port(pid, self.endpoint.port):
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
        write_owned(
            conf,
            render_template(
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
        chown_tree(self.data_dir, self.os_user)
        log.info("starting redis (config %s, log %s)", conf, self.log_path)
        result = run_command(["redis-server", str(conf)], user=self.os_user, cwd=self.data_dir)
        if result.returncode != 0:
            raise ServiceStartError(
                f"redis-server did not start: {output_tail(result)}\n"
                f"see {self.log_path}\n{log_tail(self.log_path)}"
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
        if not wait_for_exit(pid, timeout_s=60):
            raise ServiceStopError(f"redis (pid {pid}) did not exit; see {self.log_path}")

