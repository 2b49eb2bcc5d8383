"""The probe port of the long-running processes: staleness of their progress, the /health and
/metrics answers over a real socket, the port's configuration."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from chronocore.config import ConfigError, load_config
from chronocore.probe import (
    CheckResult,
    ProbeError,
    Progress,
    chosen_port,
    free_port,
    health,
    serve_probe,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_loop_that_marks_progress_is_healthy_until_it_stops_for_longer_than_its_limit():
    clock = Clock()
    progress = Progress("loop", stale_after_ms=2_000, clock=clock)
    clock.now += 1.0
    assert progress.check().healthy  # starting: given the time of one iteration
    clock.now += 1.5
    starting = progress.check()
    assert not starting.healthy and starting.details["last_progress_s_ago"] is None
    progress.mark()
    assert progress.check().healthy
    clock.now += 2.0
    assert progress.check().healthy
    clock.now += 0.01
    stale = progress.check()
    assert not stale.healthy
    assert stale.details == {"last_progress_s_ago": 2.01, "stale_after_s": 2.0}
    progress.mark()
    assert progress.check().healthy


def test_health_names_the_failing_checks_and_turns_a_raising_check_into_a_failure():
    def broken() -> CheckResult:
        raise RuntimeError("no database")

    healthy, body = health("beat", {
        "loop": lambda: CheckResult(True, {"owned_shards": 3}),
        "threads": lambda: CheckResult(False, {"dead": ["chrono-firer"]}),
        "broken": broken,
    })
    assert not healthy
    assert body["process"] == "beat"
    assert body["failing"] == ["broken", "threads"]
    assert body["checks"]["loop"] == {"healthy": True, "owned_shards": 3}
    assert body["checks"]["broken"]["error"] == "RuntimeError('no database')"


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (local)
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_probe_port_answers_503_once_progress_stops_and_serves_the_registry():
    clock = Clock()
    progress = Progress("pass", stale_after_ms=500, clock=clock)
    progress.mark()
    registry = CollectorRegistry()
    server = serve_probe(process="reaper", port=0, checks={"passes": progress.check},
                         registry=registry, progresses=[progress])
    origin = f"http://127.0.0.1:{server.port}"
    try:
        status, body = _get(f"{origin}/health")
        assert status == 200 and json.loads(body)["healthy"] is True
        clock.now += 0.75
        status, body = _get(f"{origin}/health")
        assert status == 503
        assert json.loads(body)["failing"] == ["passes"]
        status, body = _get(f"{origin}/metrics")
        assert status == 200
        assert b'chrono_progress_age_seconds{loop="pass",process="reaper"} 0.75' in body
        assert _get(f"{origin}/nothing")[0] == 404
    finally:
        server.close()


def test_a_port_in_use_is_refused_with_its_number():
    first = serve_probe(process="beat", port=0, checks={}, registry=CollectorRegistry())
    try:
        with pytest.raises(ProbeError, match=f"127.0.0.1:{first.port}"):
            serve_probe(process="beat", port=first.port, checks={},
                        registry=CollectorRegistry())
    finally:
        first.close()


def test_the_metrics_port_comes_from_the_option_else_the_config_and_must_be_a_port():
    assert chosen_port(None, 9101) == 9101
    assert chosen_port(0, 9101) == 0
    assert chosen_port(9200, 0) == 9200
    with pytest.raises(ProbeError, match="70000"):
        chosen_port(70_000, 0)
    assert load_config({"CHRONO_METRICS_PORT": "9102"}).metrics_port == 9102
    with pytest.raises(ConfigError, match="CHRONO_METRICS_PORT=65536"):
        load_config({"CHRONO_METRICS_PORT": "65536"})
    with pytest.raises(ConfigError, match="CHRONO_UNDELIVERED_FLAG_AFTER_MS must be at least"):
        load_config({"CHRONO_UNDELIVERED_FLAG_AFTER_MS": "10"})
    assert free_port() > 0
