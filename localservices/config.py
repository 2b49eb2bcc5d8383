"""Where Chrono's own servers listen, keep their data, and which credentials they require, read
once from the environment.

Each URL must name a loopback host: ``chrono services`` runs local instances only, so a URL that
points elsewhere is refused with what to change rather than silently served from 127.0.0.1. A
URL without a password takes its service's user and password from the installation's
credentials file (``chronocore.credentials``), the way every Chrono process does; ``up``
generates what the file lacks first (``localservices.secrets``).
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
    DEFAULT_SEARCH_URL,
)
from chronocore.credentials import (
    DEFAULT_DATA_DIR,
    CredentialsError,
    credentials_path,
    fill_urls,
    read_credentials,
)
from localservices.errors import ServiceConfigError

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost"})
# Chrono's RabbitMQ node; a second installation on the same host needs a name of its own
# (CHRONO_RABBITMQ_NODE_NAME), since Erlang's port mapper knows one node per name.
DEFAULT_RABBITMQ_NODE_NAME = "chrono@localhost"


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """Where a client reaches one server, parsed from its URL.

    ``namespace`` is the database name (PostgreSQL), the database index (Redis), the virtual
    host (RabbitMQ), or empty (the search engine).
    """

    host: str
    port: int
    user: str
    password: str = field(repr=False)
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
    credentials_file: Path = field(default_factory=credentials_path)
    rabbitmq_node_name: str = DEFAULT_RABBITMQ_NODE_NAME

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServicesConfig:
        """Read ``CHRONO_DATA_DIR``, the four URLs (completed from the credentials file,
        ``CHRONO_CREDENTIALS_FILE``) and ``CHRONO_RABBITMQ_NODE_NAME``."""
        env = os.environ if environ is None else environ
        data_dir = Path(env.get("CHRONO_DATA_DIR") or DEFAULT_DATA_DIR).absolute()
        path = credentials_path(env)
        try:
            stored = read_credentials(path)
        except CredentialsError as error:
            raise ServiceConfigError(str(error)) from None
        urls = fill_urls(service_urls(env), stored)
        node_name = env.get("CHRONO_RABBITMQ_NODE_NAME") or DEFAULT_RABBITMQ_NODE_NAME
        if "@" not in node_name:
            raise ServiceConfigError(
                f"CHRONO_RABBITMQ_NODE_NAME={node_name!r} must be NAME@HOST, e.g. chrono2@localhost"
            )
        return cls(
            data_dir=data_dir,
            database=parse_database_url(urls["database"]),
            redis=parse_redis_url(urls["redis"]),
            broker=parse_broker_url(urls["broker"]),
            search=parse_search_url(urls["search"]),
            credentials_file=path,
            rabbitmq_node_name=node_name,
        )


def service_urls(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The four URLs as the environment gives them (defaults for those it does not), before the
    credentials file completes them."""
    env = os.environ if environ is None else environ
    return {
        "database": env.get("DATABASE_URL") or DEFAULT_DATABASE_URL,
        "redis": env.get("REDIS_URL") or DEFAULT_REDIS_URL,
        "broker": env.get("BROKER_URL") or DEFAULT_BROKER_URL,
        "search": env.get("SEARCH_URL") or DEFAULT_SEARCH_URL,
    }


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
    """Parse ``postgresql://user[:password]@127.0.0.1:5432/dbname`` (without a password until
    the credentials file has one)."""
    parts, port = _split_local_url(
        url, variable=variable, schemes=("postgresql", "postgres"), default_port=5432
    )
    database = unquote(parts.path.lstrip("/"))
    if not (parts.username and database):
        raise ServiceConfigError(
            f"{variable} needs a user and a database name, e.g. "
            f"postgresql://chrono@127.0.0.1:{port}/chrono (the password comes from the "
            "credentials file)"
        )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username),
        password=unquote(parts.password or ""),
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
    """Parse ``amqp://[user[:password]@]127.0.0.1:5672/vhost``; ``//`` is the vhost ``/``.

    ``guest`` is refused: ``up`` removes RabbitMQ's default user from Chrono's node. A list of
    nodes (a cluster's, ``;``-separated) is refused too: ``chrono services`` runs one node, and
    ``chrono services cluster-up rabbitmq`` a cluster of its own.
    """
    if ";" in url:
        raise ServiceConfigError(
            f"{variable} lists several RabbitMQ nodes, but `chrono services` runs one node at "
            f"one URL: unset {variable} for it (a cluster started by `chrono services "
            "cluster-up rabbitmq` is given to Chrono's processes, not to `chrono services`)"
        )
    parts, port = _split_local_url(
        url, variable=variable, schemes=("amqp", "pyamqp"), default_port=5672
    )
    user = unquote(parts.username or "")
    if user == "guest":
        raise ServiceConfigError(
            f"{variable} logs in as guest, but `chrono services up` removes RabbitMQ's default "
            f"user from Chrono's node: drop the user (amqp://127.0.0.1:{port}//, the credentials "
            "file gives one) or name a user of your own"
        )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=user,
        password=unquote(parts.password or ""),
        namespace=unquote(parts.path[1:]) or "/",
    )


def parse_search_url(url: str, *, variable: str = "SEARCH_URL") -> Endpoint:
    """Parse ``http://[user[:password]@]127.0.0.1:9200``: Chrono's search node speaks plain HTTP
    on loopback with basic authentication, and serves from ``/``."""
    parts, port = _split_local_url(url, variable=variable, schemes=("http",), default_port=9200)
    if parts.path.strip("/"):
        raise ServiceConfigError(
            f"{variable}={url!r}: the search node serves from /, so drop the path"
        )
    return Endpoint(
        host=parts.hostname,
        port=port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        namespace="",
    )
