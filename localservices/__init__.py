"""Install, start, stop and report Chrono's own PostgreSQL, Redis, RabbitMQ and search engine.

``python -m localservices up|down|status`` (wired as ``chrono services …``) gives a
developer box, CI and the end-to-end tests the servers Chrono is built on, each as Chrono's own
instance: its own data directory under ``CHRONO_DATA_DIR`` (default ``/var/lib/chrono``), its own
generated configuration (templates in ``localservices/service_conf/``), listening on loopback only,
at the ports of ``DATABASE_URL``, ``REDIS_URL``, ``BROKER_URL`` and ``SEARCH_URL``, and requiring
their credentials: those a URL carries, else the ones ``up`` generates into the installation's
credentials file (``secrets``; every Chrono process reads it through ``chronocore.credentials``).
The search engine is an OpenSearch node built and started from the project's own Java launcher
in ``search/launcher``.

A server of the same kind that is not Chrono's (a Debian system instance started by apt, say) and
holds one of those ports is stopped, with a log line, because Chrono needs its configured instance.
``up`` is idempotent: an instance that already answers with its credentials and refuses clients
without them is left alone; one an older Chrono started without credentials is brought to them
(in place, or by a restart where the server cannot change while it runs).

Each server is a :class:`Service` in a module of its own (``postgresql``, ``redis``, ``rabbitmq``,
``search``); :func:`registered_services` lists them in start order. The package imports no
Django code: it runs before settings and migrations exist.
"""

from __future__ import annotations

from localservices.base import Service, port_holders
from localservices.config import (
    DEFAULT_DATA_DIR,
    DEFAULT_SEARCH_URL,
    LOOPBACK_HOSTS,
    Endpoint,
    ServicesConfig,
    parse_broker_url,
    parse_database_url,
    parse_redis_url,
    parse_search_url,
)
from localservices.errors import (
    PortBusyError,
    ServiceConfigError,
    ServiceError,
    ServiceInstallError,
    ServiceStartError,
    ServiceStopError,
)
from localservices.lifecycle import (
    bring_up,
    down,
    free_ports,
    main,
    registered_services,
    rotate,
    secured,
    status,
    up,
)
from localservices.packages import ensure_packages
from localservices.postgresql import PostgresService
from localservices.rabbitmq import RabbitMQService
from localservices.redis import RedisService
from localservices.search import SearchService
from localservices.secrets import ensure_credentials, rotate_credentials

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_SEARCH_URL",
    "LOOPBACK_HOSTS",
    "Endpoint",
    "PortBusyError",
    "PostgresService",
    "RabbitMQService",
    "RedisService",
    "SearchService",
    "Service",
    "ServiceConfigError",
    "ServiceError",
    "ServiceInstallError",
    "ServiceStartError",
    "ServiceStopError",
    "ServicesConfig",
    "bring_up",
    "down",
    "ensure_credentials",
    "ensure_packages",
    "free_ports",
    "main",
    "parse_broker_url",
    "parse_database_url",
    "parse_redis_url",
    "parse_search_url",
    "port_holders",
    "registered_services",
    "rotate",
    "rotate_credentials",
    "secured",
    "status",
    "up",
]
