"""The credentials of Chrono's services, as every Chrono process finds them.

A process connects with the URLs of its environment (``DATABASE_URL``, ``REDIS_URL``,
``BROKER_URL``, ``SEARCH_URL``). A URL that carries a password is used as it is: explicit
credentials win. A URL on a loopback host without one gets the user and password of its service
from the installation's **credentials file**, which ``chrono services up`` generates
(``localservices/secrets.py``): ``$CHRONO_CREDENTIALS_FILE``, by default
``$CHRONO_DATA_DIR/credentials.env`` (``/var/lib/chrono/credentials.env``), mode 0600, owned by
root. Only loopback URLs are filled in: the file describes the servers ``chrono services``
runs, which listen on 127.0.0.1 only, and a remote server's credentials must never be guessed.

The file is ``NAME=value`` lines (``#`` comments), one user and password per service::

    DATABASE_USER=chrono
    DATABASE_PASSWORD=…
    REDIS_PASSWORD=…
    BROKER_USER=chrono
    BROKER_PASSWORD=…
    SEARCH_USER=chrono
    SEARCH_PASSWORD=…

No quoting and no ``${…}`` expansion (a dotenv reader would expand ``$`` in a password an operator
chose): a value is everything after the first ``=``. A missing file fills in nothing (a fresh
machine before ``up``, or a deployment whose URLs carry everything); a file that exists but
cannot be read or parsed is an error naming the file, never a silent connection without
credentials. This module imports no Django and nothing else of Chrono: ``chronocore.config``
and ``chrono services`` both read the file through it.

``weak_credentials`` lists the URLs whose credentials are empty or a well-known default, for
the production settings, which refuse to start with any.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from chronocore.errors import CredentialsError

DEFAULT_DATA_DIR = "/var/lib/chrono"
CREDENTIALS_FILE_NAME = "credentials.env"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# Passwords (and users) that ship with a server or a tutorial: never acceptable in production.
WELL_KNOWN_PASSWORDS = frozenset(
    {"chrono", "guest", "postgres", "redis", "admin", "elastic", "changeme", "password", "secret"}
)


@dataclass(frozen=True, kw_only=True)
class Secret:
    """One service's user and password; Redis has no user (``requirepass`` is the default
    user's password), so its ``user`` is empty."""

    user: str
    password: str = field(repr=False)


@dataclass(frozen=True, kw_only=True)
class ServiceCredentials:
    """What the credentials file holds: one :class:`Secret` per service, or None when absent.

    The field names are the services' URL variables without ``_URL`` (``database`` for
    ``DATABASE_URL``); the file's keys are ``<FIELD>_USER`` and ``<FIELD>_PASSWORD``.
    """

    database: Secret | None = None
    redis: Secret | None = None
    broker: Secret | None = None
    search: Secret | None = None

    def replace(self, **secrets: Secret | None) -> ServiceCredentials:
        return ServiceCredentials(**{**self.as_dict(), **secrets})

    def as_dict(self) -> dict[str, Secret | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


SERVICES = tuple(f.name for f in fields(ServiceCredentials))
# Redis's secret is the default user's password: the file names no user for it.
USERLESS_SERVICES = frozenset({"redis"})


def credentials_path(environ: Mapping[str, str] | None = None) -> Path:
    """``$CHRONO_CREDENTIALS_FILE``, else ``credentials.env`` in ``$CHRONO_DATA_DIR``."""
    env = os.environ if environ is None else environ
    if env.get("CHRONO_CREDENTIALS_FILE"):
        return Path(env["CHRONO_CREDENTIALS_FILE"]).absolute()
    return Path(env.get("CHRONO_DATA_DIR") or DEFAULT_DATA_DIR).absolute() / CREDENTIALS_FILE_NAME


def read_credentials(path: Path) -> ServiceCredentials:
    """The credentials in ``path``; empty when there is no such file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ServiceCredentials()
    except OSError as error:
        raise CredentialsError(
            f"cannot read the credentials file {path} ({error.strerror}): run Chrono as root "
            "(the file is root's, mode 0600), or give the URLs with their credentials "
            "(DATABASE_URL, REDIS_URL, BROKER_URL, SEARCH_URL)"
        ) from None
    return parse_credentials(text, source=str(path))


def parse_credentials(text: str, *, source: str) -> ServiceCredentials:
    """Parse the file's text; ``source`` names it in errors."""
    values: dict[str, str] = {}
    known = {f"{name.upper()}_{part}" for name in SERVICES for part in ("USER", "PASSWORD")}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        if not equals or name.strip() not in known:
            raise CredentialsError(
                f"{source}, line {number}: expected NAME=value with NAME one of "
                f"{', '.join(sorted(known))}"
            )
        values[name.strip()] = value.strip()
    secrets = {}
    for name in SERVICES:
        password = values.get(f"{name.upper()}_PASSWORD", "")
        if password:
            secrets[name] = Secret(user=values.get(f"{name.upper()}_USER", ""), password=password)
    return ServiceCredentials(**secrets)


def render_credentials(credentials: ServiceCredentials, *, header: str) -> str:
    """The file's text for ``credentials``: ``header`` as comments, then every service's lines."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for name, secret in credentials.as_dict().items():
        if secret is None:
            continue
        if name not in USERLESS_SERVICES:
            lines.append(f"{name.upper()}_USER={secret.user}")
        lines.append(f"{name.upper()}_PASSWORD={secret.password}")
    return "\n".join(lines) + "\n"


def split_hosts(netloc: str) -> tuple[str, list[tuple[str, int | None]]]:
    """A URL's ``userinfo@host[:port][,host[:port]…]`` as its userinfo (``""`` when none) and
    its hosts, each with its port (None: the scheme's default). libpq's multi-host URLs
    (``postgresql://u:p@db1:5432,db2:5432/chrono``) have several; an IPv6 host is in brackets.

    Written here rather than taken from urllib: ``urlsplit`` reads one host, and fails on the
    port of a list."""
    userinfo, _, hostlist = netloc.rpartition("@")
    hosts: list[tuple[str, int | None]] = []
    for item in hostlist.split(","):
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, _, port_text = item.partition(":")
        if port_text and not port_text.isdigit():
            raise ValueError(f"the port of {item!r} is not a number")
        hosts.append((host.lower(), int(port_text) if port_text else None))
    return userinfo, hosts


def host_text(host: str, port: int | None) -> str:
    """``host[:port]`` as a URL writes it (an IPv6 host in brackets)."""
    text = f"[{host}]" if ":" in host else host
    return f"{text}:{port}" if port else text


def with_secret(url: str, secret: Secret | None) -> str:
    """``url`` with ``secret``'s user and password, unless the URL needs none of them.

    Unchanged when ``secret`` is None, when the URL already has a password (explicit wins),
    names another user than the secret's, or points at a host other than loopback.
    """
    if secret is None:
        return url
    parts = urlsplit(url)
    try:
        _, hosts = split_hosts(parts.netloc)
    except ValueError:
        return url  # the URL's own parser names the mistake
    if parts.password or any(host not in LOOPBACK_HOSTS for host, _ in hosts):
        return url
    if parts.username and unquote(parts.username) not in (secret.user, "default"):
        return url
    userinfo = f"{quote(secret.user, safe='')}:{quote(secret.password, safe='')}"
    hostlist = ",".join(host_text(host, port) for host, port in hosts)
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{hostlist}"))


def fill_urls(urls: Mapping[str, str], credentials: ServiceCredentials) -> dict[str, str]:
    """``{"database": url, …}`` with each URL given its service's secret (:func:`with_secret`);
    each node of a broker list (``;``-separated, ``chronocore.broker_urls``) on its own."""
    filled = {}
    for name, url in urls.items():
        secret = getattr(credentials, name)
        nodes = url.split(";") if name == "broker" else [url]
        filled[name] = ";".join(with_secret(node, secret) for node in nodes)
    return filled


# What a URL with credentials looks like, for the error that asks for one.
URL_EXAMPLES = {
    "database": "postgresql://USER:PASSWORD@HOST:5432/chrono",
    "redis": "redis://:PASSWORD@HOST:6379/0",
    "broker": "amqp://USER:PASSWORD@HOST:5672/VHOST",
    "search": "https://USER:PASSWORD@HOST:9200, or CHRONO_SEARCH_API_KEY",
}


def weak_credentials(urls: Mapping[str, str], *, search_api_key: str = "") -> list[str]:
    """One line per URL whose credentials are empty or well known, naming what to set.

    ``urls`` maps service names (``database``…) to URLs, as completed from the credentials file.
    """
    problems = []
    for name, url in urls.items():
        if name == "search" and search_api_key:
            continue
        # A broker list (``;``-separated) is as weak as its weakest node.
        nodes = url.split(";") if name == "broker" else [url]
        weakness = [why for node in nodes if (why := _weakness(node))]
        if weakness:
            problems.append(f"{name.upper()}_URL {weakness[0]}: set it to {URL_EXAMPLES[name]}")
    return problems


def _weakness(url: str) -> str | None:
    """What is weak about one URL's credentials, or None."""
    parts = urlsplit(url)
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    if not password:
        return "has no password"
    if password.lower() in WELL_KNOWN_PASSWORDS or password == user:
        return "has a well-known default password"
    if user.lower() == "guest":
        return "logs in as guest, RabbitMQ's default user"
    return None
