"""Where Chrono's own servers listen and keep their data, read once from the environment.

Each URL must name a loopback host: ``chrono services`` runs local instances only, so a URL that
points elsewhere is refused with what to change rather than silently served from 127.0.0.1.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

# The URL defaults live in one place; chronocore.config imports nothing from Django.
from chronocore.config import (
    DEFAULT_BROKER_URL,
    DEFAULT_DATABASE_URL,
    DEFAULT_REDIS_URL,
    ChronoConfig,
)
from localservices.errors import ServiceConfigError

DEFAULT_DATA_DIR = "/var/lib/chrono"
# A dataclass keeps a field's default as a class attribute: this is ChronoConfig's own default.
DEFAULT_SEARCH_URL: str = ChronoConfig.search_url
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a client reaches one server, parsed from its URL.

    ``namespace`` is the database name (PostgreSQL), the database index (Redis), the virtual
    host (RabbitMQ), or empty (the search engine).
    """

    host: str
    port: int
    user: str
    password: str
    namespace: str

    @property
    def address(self) -> str:
        """``host:port``, as printed by ``status``."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, kw_only=True)
class ServicesConfig:
    """Everything the service manager reads from the environment, read once."""

    data_dir: Path
    database: Endpoint
    redis: Endpoint
    broker: Endpoint
    search: Endpoint = field(default_factory=lambda: parse_search_url(DEFAULT_SEARCH_URL))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServicesConfig:
        """Read ``CHRONO_DATA_DIR``, ``DATABASE_URL``, ``REDIS_URL``, ``BROKER_URL`` and
        ``SEARCH_URL``."""
        env = os.environ if environ is None else environ
        data_dir = Path(env.get("CHRONO_DATA_DIR") or DEFAULT_DATA_DIR).absolute()
        return cls(
            data_dir=data_dir,
            database=parse_database_url(env.get("DATABASE_URL") or DEFAULT_DATABASE_URL),
            redis=parse_redis_url(env.get("REDIS_URL") or DEFAULT_REDIS_URL),
            broker=parse_broker_url(env.get("BROKER_URL") or DEFAULT_BROKER_URL),
            search=parse_search_url(env.get("SEARCH_URL") or DEFAULT_SEARCH_URL),
        )


def _split_local_url(
    url: str, *, variable: str, schemes: Sequence[str], default_port: int
) -> tuple[SplitResult, int]:
    """Split ``url`` and check it names a loopback host Chrono can serve."""
    parts = urlsplit(url)
    if parts.scheme not in schemes:
        raise ServiceConfigError(f"{variable}={url!r}: the scheme must be one of {list(schemes)}")
    if parts.hostname not in LOOPBACK_HOSTS:
        raise ServiceConfigError(
            f"{variable} points at {parts.hostname!r}, but chrono services runs local instances "
            f"on 127.0.0.1 only; unset {variable} or point it at 127.0.0.1"
        )
    try:
        port = parts.port or default_port
    except ValueError:
        raise ServiceConfigError(f"{variable}={url!r}: the port is not a number") from None
    return parts, port


def parse_database_url(url: str, *, variable: str = "DATABASE_URL") -> Endpoint:
    """Parse ``postgresql://user:password@127.0.0.1:5432/dbname``."""
    parts, port = _split_local_url(
        url, variable=variable, schemes=("postgresql", "postgres"), default_port=5432
    )
    database = unquote(parts.path.lstrip("/"))
    if not (parts.username and parts.password and database):
        raise ServiceConfigError(
            f"{variable} needs a user, a password and a database name, e.g. "
            f"postgresql://chrono:SECRET@127.0.0.1:{port}/chrono (TCP logins use passwords)"
        )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username),
        password=unquote(parts.password),
        namespace=database,
    )


def parse_redis_url(url: str, *, variable: str = "REDIS_URL") -> Endpoint:
    """Parse ``redis://[:password@]127.0.0.1:6379/0`` (Chrono's Redis has no ACL users)."""
    parts, port = _split_local_url(url, variable=variable, schemes=("redis",), default_port=6379)
    if parts.username not in (None, "", "default"):
        raise ServiceConfigError(
            f"{variable} names the user {parts.username!r}; Chrono's Redis has only the default "
            f"user, so give the password alone: redis://:SECRET@127.0.0.1:{port}/0"
        )
    index = parts.path.lstrip("/") or "0"
    if not index.isdigit() or int(index) > 15:
        raise ServiceConfigError(f"{variable}: the database index must be 0..15, not {index!r}")
    return Endpoint(
        host=parts.hostname,
        port=port,
        user="default",
        password=unquote(parts.password or ""),
        namespace=index,
    )


def parse_broker_url(url: str, *, variable: str = "BROKER_URL") -> Endpoint:
    """Parse ``amqp://user:password@127.0.0.1:5672/vhost``; ``//`` is the vhost ``/``."""
    parts, port = _split_local_url(
        url, variable=variable, schemes=("amqp", "pyamqp"), default_port=5672
    )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or "guest"),
        password=unquote(parts.password or "guest"),
        namespace=unquote(parts.path[1:]) or "/",
    )


def parse_search_url(url: str, *, variable: str = "SEARCH_URL") -> Endpoint:
    """Parse ``http://127.0.0.1:9200``: Chrono's search node speaks plain HTTP on loopback and
    has no security plugin, so the URL carries no user, password or path."""
    parts, port = _split_local_url(url, variable=variable, schemes=("http",), default_port=9200)
    if parts.username or parts.password:
        raise ServiceConfigError(
            f"{variable} has a user or password, but Chrono's search node has no security "
            f"plugin; use http://127.0.0.1:{port}"
        )
    if parts.path.strip("/"):
        raise ServiceConfigError(
            f"{variable}={url!r}: the search node serves from /, so drop the path"
        )
    return Endpoint(host=parts.hostname, port=port, user="", password="", namespace="")
