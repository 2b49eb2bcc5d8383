"""The peers benchmark's own environment: a virtualenv with pinned peers, a database, processes.

``chrono bench peers`` runs Celery beat, django-celery-beat and RedBeat next to Chrono, each at a
pinned version, in a virtualenv of their own (``<data_dir>/bench-peers``, or ``--venv``),
created on first use and kept: a later run whose pins are those already installed installs
nothing. django-celery-beat keeps its schedule in the database ``chrono_peers`` of the shared
PostgreSQL (created for the run with Chrono's own credentials, dropped after it). The peers'
processes run ``bench/peers_project`` (nothing there imports Chrono).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from chronocore.config import get_config
from localservices.processes import ChronoProcess, ProcessGroup

PEERS_PROJECT = Path(__file__).resolve().parent / "peers_project"
PEERS_DATABASE = "chrono_peers"
# The peers as a user would install them today (versions checked against PyPI's listing), and
# what they need that the resolver could otherwise pick anew each time.
PEERS_REQUIREMENTS = (
    "celery==5.7.0",
    "django-celery-beat==2.9.0",
    "celery-redbeat==2.4.2",
    "django==5.2.19",
    "redis==6.4.0",
    "psycopg[binary]==3.3.9",
    "matplotlib==3.11.2",
)
INSTALL_TIMEOUT_S = 900
MARKER = ".chrono-peers-requirements"


def default_venv() -> Path:
    return Path(get_config().data_dir) / "bench-peers"


def ensure_venv(venv: Path) -> Path:
    """The virtualenv's python, with :data:`PEERS_REQUIREMENTS` installed (once)."""
    python = venv / "bin" / "python"
    wanted = "\n".join(PEERS_REQUIREMENTS) + "\n"
    marker = venv / MARKER
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    *PEERS_REQUIREMENTS], check=True, timeout=INSTALL_TIMEOUT_S)
    marker.write_text(wanted)
    return python


def peer_env(queue: str = "peers") -> dict[str, str]:
    """The ``PEERS_*`` settings of the peers' processes: this configuration's broker and
    Redis, the peers' database, and ``queue``."""
    config = get_config()
    return {"PEERS_BROKER_URL": config.broker_url, "PEERS_REDIS_URL": config.redis_url,
            "PEERS_DATABASE_URL": peers_database_url(), "PEERS_QUEUE": queue}


def peers_database_url() -> str:
    parts = urlsplit(get_config().database_url)
    return urlunsplit(parts._replace(scheme="postgresql", path=f"/{PEERS_DATABASE}"))


def create_peers_database() -> None:
    """``chrono_peers``, empty (one left by a run that was killed is dropped first)."""
    _admin(f"DROP DATABASE IF EXISTS {PEERS_DATABASE} WITH (FORCE)")
    _admin(f"CREATE DATABASE {PEERS_DATABASE}")


def drop_peers_database() -> None:
    _admin(f"DROP DATABASE IF EXISTS {PEERS_DATABASE} WITH (FORCE)")


def _admin(statement: str) -> None:
    import psycopg

    url = urlunsplit(urlsplit(get_config().database_url)._replace(scheme="postgresql"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(statement)


class PeerProcesses:
    """Starting the peers' commands in their virtualenv, with the run's ``PEERS_*`` settings,
    as children of ``group`` (stopped with the rest by ``stop_all``)."""

    def __init__(self, python: Path, group: ProcessGroup, env: Mapping[str, str]) -> None:
        self.python = python
        self.group = group
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("DJANGO_", "CHRONO_", "PYTHON"))}
        self.env.update(env, PYTHONPATH=str(PEERS_PROJECT), PYTHONUNBUFFERED="1",
                        PYTHONDONTWRITEBYTECODE="1", DJANGO_SETTINGS_MODULE="peers_settings")

    def start(self, name: str, argv: Sequence[str], **env: str) -> ChronoProcess:
        self.group.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.group.log_dir / f"{name}.log"
        with open(log_path, "ab") as log:
            # cwd: the log directory, where a peer may leave files (the project is on the path)
            popen = subprocess.Popen([str(self.python), *argv], cwd=self.group.log_dir,
                                     env={**self.env, **env}, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        child = ChronoProcess(name=name, popen=popen, log_path=log_path)
        self.group.children.append(child)
        return child

    def run(self, argv: Sequence[str], *, timeout_s: float, **env: str) -> None:
        """A setup command to its end (its output in the log directory)."""
        with tempfile.NamedTemporaryFile("w+", dir=self.group.log_dir, prefix="setup-",
                                         suffix=".log", delete=False) as log:
            done = subprocess.run([str(self.python), *argv], cwd=self.group.log_dir,
                                  env={**self.env, **env}, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=timeout_s)
        if done.returncode:
            tail = Path(log.name).read_text(errors="replace")[-2_000:]
            raise RuntimeError(f"peers {' '.join(argv)} failed:\n{tail}")

    def worker(self, queue: str, *, queue_type: str = "classic", concurrency: int = 2,
               pool: str = "prefork", **env: str) -> ChronoProcess:
        """A plain Celery worker of the peers' app: the peers benchmark's one worker kind
        (prefork, concurrency 2), and ``chrono bench drain``'s plain worker."""
        return self.start("peers-worker", [
            "-m", "celery", "-A", "peers_celery", "worker", "--pool", pool,
            "--concurrency", str(concurrency), "--queues", queue, "--hostname",
            f"peers@{queue}", "--without-gossip", "--without-mingle", "--without-heartbeat",
            "--loglevel", "WARNING"], PEERS_QUEUE=queue, PEERS_QUEUE_TYPE=queue_type, **env)

    def beat(self, system: str, queue: str, schedule_dir: Path, **env: str) -> ChronoProcess:
        scheduler = {"beat": "celery.beat:PersistentScheduler",
                     "redbeat": "redbeat.RedBeatScheduler",
                     "django-celery-beat": "django_celery_beat.schedulers:DatabaseScheduler",
                     }[system]
        return self.start(f"{system}-beat", [
            "-m", "celery", "-A", "peers_celery", "beat", "--scheduler", scheduler,
            "--schedule", str(schedule_dir / "celerybeat-schedule"),
            "--pidfile", str(schedule_dir / "beat.pid"), "--loglevel", "WARNING"],
            PEERS_QUEUE=queue, **env)
