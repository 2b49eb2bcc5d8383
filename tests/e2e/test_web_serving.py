"""``chrono web`` as a real gunicorn process: the admin's stylesheet and the API documentation's
assets are served by the process itself (no CDN), API errors are JSON, and a 500 is logged with
its traceback under the request id its response carries."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from urllib.parse import urlsplit, urlunsplit

import pytest

from chronocore.config import get_config
from localservices.processes import ProcessGroup

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - loopback
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _web_process(tmp_path, *options: str):
    """A `chrono web` process on a free port against the test database, with one extra view
    that fails on purpose (tests.web_failing_urls); its group, origin and process."""
    from django.db import connection

    base = urlsplit(get_config().database_url)
    database_url = urlunsplit(base._replace(path=f"/{connection.settings_dict['NAME']}"))
    port = _free_port()
    group = ProcessGroup(
        env={"DATABASE_URL": database_url, "REDIS_URL": os.environ["REDIS_URL"],
             "DJANGO_SETTINGS_MODULE": "tests.web_failing_settings"},
        log_dir=tmp_path / "logs",
    )
    process = group.start("web", ["web", f"127.0.0.1:{port}", "--workers", "1", *options])
    origin = f"http://127.0.0.1:{port}"

    def answering() -> bool:
        try:
            return _get(f"{origin}/health/")[0] in (200, 503)
        except OSError:
            return False

    process.wait_until(answering, timeout_s=60, what="answering HTTP")
    return group, origin, process


@pytest.fixture
def web(transactional_db, tmp_path):
    group, origin, process = _web_process(tmp_path)
    yield origin, process
    group.stop_all()


def test_with_log_format_json_every_line_is_a_json_object(transactional_db, tmp_path):
    """The access lines, gunicorn's own and a 500's traceback, all one JSON object a line, as
    every other Chrono process logs with ``--log-format json``."""
    group, origin, process = _web_process(tmp_path, "--log-format", "json")
    try:
        assert _get(f"{origin}/api/v1/test-failure/")[0] == 500
        process.wait_until(lambda: "deliberate failure" in process.log_tail(200),
                           timeout_s=10, what="logging the failure")
    finally:
        group.stop_all()
    lines = [line for line in process.log_tail(400).splitlines() if line.strip()]
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(records) == len(lines), [line for line in lines if not line.startswith("{")]
    assert any("/health/" in r["message"] and r["logger"] == "gunicorn.access" for r in records)
    failure = next(r for r in records if "deliberate failure" in json.dumps(r))
    assert failure["level"] == "ERROR" and "exc_info" in failure


def test_admin_pages_get_their_stylesheet_from_the_web_process(web):
    origin, _ = web
    status, _, page = _get(f"{origin}/admin/login/")
    assert status == 200
    stylesheets = re.findall(rb'<link rel="stylesheet" href="([^"]+)"', page)
    assert any(b"admin/css/base.css" in href for href in stylesheets), stylesheets
    for href in stylesheets:
        status, headers, body = _get(origin + href.decode())
        assert status == 200, href
        assert headers["Content-Type"].startswith("text/css"), href
        assert body, href


def test_api_documentation_loads_only_bundled_assets(web):
    origin, _ = web
    for page_path in ("/api/docs/", "/api/redoc/"):
        status, _, page = _get(origin + page_path)
        assert status == 200, page_path
        assets = re.findall(rb'(?:src|href)="([^"]+\.(?:js|css|png))"', page)
        assert assets, page_path
        for asset in assets:
            assert asset.startswith(b"/static/"), f"{page_path} loads {asset!r} from elsewhere"
            assert _get(origin + asset.decode())[0] == 200, asset


def test_an_unknown_api_path_answers_json(web):
    origin, _ = web
    status, headers, body = _get(f"{origin}/api/v1/no-such-endpoint/")
    assert status == 404
    assert headers["Content-Type"] == "application/json"
    assert b"/api/schema/" in body


def test_a_500_is_logged_with_its_traceback_under_the_request_id_it_returns(web):
    origin, process = web
    status, headers, body = _get(f"{origin}/api/v1/test-failure/")
    assert status == 500
    request_id = headers["X-Request-ID"]
    assert headers["Content-Type"] == "application/json"
    assert request_id.encode() in body
    assert b"deliberate failure" not in body, "the response must not carry the exception"
    process.wait_until(lambda: "deliberate failure" in process.log_tail(200), timeout_s=10,
                       what="logging the failure")
    log = process.log_tail(200)
    assert f"[request {request_id}]" in log
    assert "Traceback (most recent call last)" in log
    assert "ViewFailed: deliberate failure for the error-handling test" in log


def test_a_page_500_names_the_request_id_too(web):
    origin, _ = web
    status, headers, body = _get(f"{origin}/test-failure/")
    assert status == 500
    assert headers["X-Request-ID"].encode() in body


def test_a_safe_request_id_from_the_client_is_kept_and_an_unsafe_one_replaced(web):
    origin, _ = web
    kept = _get(f"{origin}/health/", {"X-Request-ID": "trace-1234abcd"})[1]["X-Request-ID"]
    assert kept == "trace-1234abcd"
    replaced = _get(f"{origin}/health/", {"X-Request-ID": "x<script>"})[1]["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", replaced)
