"""``BROKER_URL`` as a list of RabbitMQ nodes: one URL, or several separated by ``;``.

A RabbitMQ cluster is reached through any of its nodes, so a deployment lists them all::

    BROKER_URL=amqp://chrono:SECRET@rabbit1:5672/chrono;amqp://chrono:SECRET@rabbit2:5672/chrono

The form is kombu's own (``Connection('amqp://a;amqp://b')``: the first URL, then the others as
fail-over alternates, round robin), so Celery's workers take the value as it is, and Chrono's
publishers (:class:`scheduler.dispatch.Publisher`) and queue inspectors read it the same way:
they connect to the first node that answers and, when their connection breaks, to the next.

Every node is given in full (user, password, virtual host) because kombu switches to an
alternate's URL as written. All of them must name the same virtual host: a cluster's virtual
hosts are cluster-wide, so two different ones would be two separate sets of queues, and jobs
published to one would never reach the workers of the other. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import unquote, urlsplit, urlunsplit

from chronocore.errors import ConfigError

BROKER_URL_SEPARATOR = ";"
BROKER_SCHEMES = ("amqp", "amqps", "pyamqp")
EXAMPLE = ("amqp://USER:PASSWORD@rabbit1:5672/VHOST;"
           "amqp://USER:PASSWORD@rabbit2:5672/VHOST")


def redacted(url: str) -> str:
    """``url`` with its password replaced by ``***``, for errors and log lines."""
    parts = urlsplit(url)
    if not parts.password:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


def node_address(url: str) -> str:
    """``host:port`` of one node's URL (5672, or 5671 for ``amqps``, when it has no port)."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    default = 5671 if parts.scheme == "amqps" else 5672
    try:
        port = parts.port or default
    except ValueError:
        port = default
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def virtual_host(url: str) -> str:
    """The virtual host one node's URL names (``/`` for none, or ``//``)."""
    path = urlsplit(url).path
    return unquote(path[1:]) if path not in ("", "/") else "/"


def split_broker_urls(value: str, *, variable: str = "BROKER_URL") -> tuple[str, ...]:
    """The nodes' URLs of ``value``, in its order; raises :class:`ConfigError`, naming
    ``variable``, for an empty entry, a URL that is not AMQP or has no host or a bad port, a
    node listed twice, or nodes of different virtual hosts."""
    urls = tuple(part.strip() for part in value.split(BROKER_URL_SEPARATOR))
    for number, url in enumerate(urls, start=1):
        _check_node(url, number=number, count=len(urls), variable=variable)
    seen: dict[str, int] = {}
    for number, url in enumerate(urls, start=1):
        address = node_address(url)
        if address in seen:
            raise ConfigError(
                f"{variable} lists the node {address} twice (entries {seen[address]} and "
                f"{number}): list each node of the cluster once")
        seen[address] = number
    vhosts = {virtual_host(url) for url in urls}
    if len(vhosts) > 1:
        raise ConfigError(
            f"{variable} names different virtual hosts ({', '.join(sorted(vhosts))}) for the "
            "nodes of one cluster: give every node the same one, e.g. " + EXAMPLE)
    return urls


def _check_node(url: str, *, number: int, count: int, variable: str) -> None:
    where = f"{variable} entry {number} of {count}" if count > 1 else variable
    if not url:
        raise ConfigError(
            f"{where} is empty: separate the nodes' URLs with a single ';' and nothing after "
            f"the last, e.g. {EXAMPLE}")
    parts = urlsplit(url)
    if parts.scheme not in BROKER_SCHEMES:
        raise ConfigError(
            f"{where} ({redacted(url)}) must start with amqp:// or amqps://, got "
            f"{parts.scheme!r}")
    if not parts.hostname:
        raise ConfigError(f"{where} ({redacted(url)}) names no host, e.g. {EXAMPLE}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ConfigError(f"{where} ({redacted(url)}): the port is not a number") from None


def rotated(urls: Sequence[str], first: int) -> tuple[str, ...]:
    """``urls`` starting at index ``first`` (modulo their number), the rest in order after it:
    a process given this list connects to node ``first`` first."""
    if not urls:
        return ()
    first %= len(urls)
    return tuple(urls[first:]) + tuple(urls[:first])


def join_broker_urls(urls: Sequence[str]) -> str:
    """The ``BROKER_URL`` value of ``urls`` (``;``-separated)."""
    return BROKER_URL_SEPARATOR.join(urls)
