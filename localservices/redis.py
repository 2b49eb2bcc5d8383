"""Chrono's Redis: an append-only-file instance started from ``service_conf/redis.conf``.

It requires the password of ``REDIS_URL`` (from the credentials file): ``requirepass``, which is
the password of Redis's default user, the only user Chrono's Redis has. ``provision`` sets it on
a running server with ``CONFIG SET`` (no restart, no timer lost), administering it with the
password its configuration file holds, and writes that file so a restart keeps it.
"""

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

    @property
    def conf_path(self) -> Path:
        return self.data_dir / "redis.conf"

    def client(self) -> redis.Redis:
        """A client for Chrono's instance with the URL's credentials."""
        return self._client(self.endpoint.password or None)

    def _client(self, password: str | None) -> redis.Redis:
        """A client logging in with ``password`` (None: none at all).

        It never retries: a probe must answer at once, and redis-py's default retries turn the
        connection that SHUTDOWN closes into seconds of back-off.
        """
        e = self.endpoint
        return redis.Redis(
            host=e.host,
            port=e.port,
            password=password,
            db=int(e.namespace),
            socket_timeout=PROBE_TIMEOUT_S,
            socket_connect_timeout=PROBE_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
        )

    def _listening(self) -> bool:
        pid = self.pid()
        return pid is not None and holds_port(pid, self.endpoint.port)

    def _ping(self, password: str | None) -> str:
        """``ok``, ``refused`` (the server wants another password), ``loading`` (it took the
        password but is still reading its append-only file) or ``down``."""
        try:
            with self._client(password) as client:
                client.ping()
        except redis.AuthenticationError:
            return "refused"
        except redis.BusyLoadingError:
            return "loading"
        except redis.ResponseError as error:  # NOAUTH before Redis 6, WRONGPASS after
            return "refused" if "AUTH" in str(error).upper() else "down"
        except redis.RedisError:
            return "down"
        return "ok"

    def ready(self) -> bool:
        """Up and done loading, whether or not it takes the URL's password yet (``provision``
        sets it).

        A restarted Redis listens while it replays its append-only file and answers every
        command but AUTH with LOADING, so "listening" is not "ready": the password that logs in
        (the URL's, the configuration file's, or none) must get past that, or ``provision``
        would take the server for one that refuses every password.
        """
        if not self._listening():
            return False
        states = {self._ping(password) for password in self._candidate_passwords()}
        return "loading" not in states and states != {"down"}

    def _candidate_passwords(self) -> tuple[str | None, ...]:
        """The passwords the running server may take: the URL's, the one its configuration
        file holds (what it was last given), none (a server of an older Chrono)."""
        return (self.endpoint.password or None, self._configured_password(), None)

    def answers(self) -> bool:
        return self._listening() and self._ping(self.endpoint.password or None) == "ok"

    def refuses_anonymous(self) -> bool:
        if not self._listening():
            return False
        wrong = (self.endpoint.password or "") + "-wrong"
        return all(self._ping(password) == "refused" for password in (None, wrong))

    def restart_reason(self) -> str | None:
        return None  # CONFIG SET requirepass applies at once

    def _render_conf(self) -> str:
        password = self.endpoint.password.replace("\\", "\\\\").replace('"', '\\"')
        password_line = f'requirepass "{password}"' if password else "# REDIS_URL has no password"
        return render_template(
            "redis.conf",
            port=self.endpoint.port,
            pid_file=self.pid_file,
            log_file=self.log_path,
            data_dir=self.data_dir,
            password_line=password_line,
        )

    def _configured_password(self) -> str | None:
        """The ``requirepass`` of the configuration file on disk (what the running server was
        last given), or None."""
        try:
            text = self.conf_path.read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("requirepass "):
                value = line.split(" ", 1)[1].strip()
                if value.startswith('"') and value.endswith('"'):
                    value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
                return value
        return None

    def start(self) -> None:
        self.data_dir.mkdir(mode=0o750, exist_ok=True)
        write_owned(self.conf_path, self._render_conf(), user=self.os_user, mode=0o640)
        chown_tree(self.data_dir, self.os_user)
        conf = self.conf_path
        log.info("starting redis (config %s, log %s)", conf, self.log_path)
        result = run_command(["redis-server", str(conf)], user=self.os_user, cwd=self.data_dir)
        if result.returncode != 0:
            raise ServiceStartError(
                f"redis-server did not start: {output_tail(result)}\n"
                f"see {self.log_path}\n{log_tail(self.log_path)}"
            )

    def provision(self) -> None:
        """Make the running server require the URL's password (the database index always
        exists, so there is nothing to create)."""
        if not self.endpoint.password:
            raise ServiceStartError(
                "REDIS_URL has no password and the credentials file none; run "
                "`chrono services up` (it generates one) or give one in REDIS_URL"
            )
        if not (self.answers() and self.refuses_anonymous()):
            self._set_password()
        write_owned(self.conf_path, self._render_conf(), user=self.os_user, mode=0o640)

    def _set_password(self) -> None:
        """``CONFIG SET requirepass``, logged in with whichever password the server takes now:
        the URL's, the one its configuration file holds, or none (a server of an older Chrono)."""
        for password in self._candidate_passwords():
            if self._ping(password) != "ok":
                continue
            log.info("redis: requiring the password of REDIS_URL (CONFIG SET requirepass)")
            with self._client(password) as client:
                client.config_set("requirepass", self.endpoint.password)
            return
        raise ServiceStartError(
            f"redis on {self.address} takes neither the password of REDIS_URL nor the one in "
            f"{self.conf_path}; stop it (`chrono services down`) and run `up` again"
        )

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

