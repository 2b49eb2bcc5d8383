"""Reading Prometheus expositions and probe ports in tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition: ``(name, frozenset of label items) -> value``."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """The sample ``name`` with exactly ``labels``; None when absent."""
    return samples(text).get((name, frozenset(labels.items())))


def names(text: str) -> set[str]:
    return {name for name, _ in samples(text)}


def http_get(url: str, *, timeout_s: float = 5) -> tuple[int, bytes]:
    """``(status, body)`` of a GET; (0, b"") when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def probe_health(port: int) -> tuple[int, dict]:
    status, body = http_get(f"http://127.0.0.1:{port}/health")
    return status, (json.loads(body) if status else {})


def probe_metrics(port: int) -> str:
    status, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, status
    return body.decode()
