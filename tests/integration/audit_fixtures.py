"""Fixtures of the audit tests, loaded with ``pytest_plugins`` by each of them.

Every test session gets an audit data stream of its own (namespace ``t<random>``) on the real
engine ``chrono services up`` started, created by the same :func:`search.index_template.install`
the indexer runs, and deleted at the end, so test runs side by side on one engine do not meet.
Outbox ids come from a PostgreSQL sequence, which a rolled-back test does not rewind, so documents
of different tests never share an ``_id``.
"""

from __future__ import annotations

import os
import uuid

import pytest

from chronocore.config import get_config
from search import log_stream
from search.client import SearchClient
from search.index_template import AuditStream, install, uninstall
from search.indexer import Indexer


@pytest.fixture(scope="session")
def search_client(services_up):
    with SearchClient.from_config(get_config()) as client:
        yield client


@pytest.fixture(scope="session")
def audit_stream(search_client):
    """This session's audit data stream; the config names it, so the search API reads it."""
    namespace = f"t{uuid.uuid4().hex[:12]}"
    saved = {name: os.environ.get(name) for name in _ENV}
    os.environ.update({"CHRONO_AUDIT_NAMESPACE": namespace, "CHRONO_AUDIT_INDEX_REPLICAS": "0"})
    get_config.cache_clear()
    stream = AuditStream(namespace)
    install(search_client, get_config(), stream)
    yield stream
    uninstall(search_client, stream)
    # The execution logs of the session's namespace, which any indexer it started shipped.
    log_stream.uninstall(search_client, log_stream.LogStream(namespace))
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    get_config.cache_clear()


_ENV = ("CHRONO_AUDIT_NAMESPACE", "CHRONO_AUDIT_INDEX_REPLICAS")


@pytest.fixture
def indexer(audit_stream, search_client, db):
    return Indexer(client=search_client, config=get_config(), stream=audit_stream)
