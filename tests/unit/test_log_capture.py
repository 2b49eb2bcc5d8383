"""The capture of execution logs (scheduler/log_capture.py): records routed by context to their
attempt, never mixed between threads, bounded per attempt and per process with what was dropped
counted on a closing line, and written to the spool as documents with their ids."""

from __future__ import annotations

import json
import logging
import threading

import pytest

from scheduler import log_capture
from search.spool import SpoolReader

app_log = logging.getLogger("tests.app")


@pytest.fixture
def capture(tmp_path):
    """A routing handler on the root logger writing to a spool of the test's own."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)

    def install(**bounds):
        options = dict(spool_dir=tmp_path, namespace="unit", level="INFO",
                       flush_interval_ms=10_000, max_bytes=1024 * 1024,
                       buffer_bytes=1024 * 1024, line_bytes=1024, segment_bytes=1024 * 1024)
        options.update(bounds)
        return log_capture.install(**options)

    yield install
    log_capture.uninstall()
    root.setLevel(level)


def spooled(handler, tmp_path) -> list[tuple[str, dict]]:
    handler.buffer.flush()
    batch = SpoolReader(tmp_path, batch_bytes=64 * 1024 * 1024).read_batch()
    return [(doc_id, json.loads(doc)) for doc_id, doc in batch.lines]


def attempt(execution_id: str, number: int = 1) -> log_capture.AttemptLog:
    return log_capture.AttemptLog(tenant_id="tenant-1", job_id="job-1",
                                  execution_id=execution_id, attempt=number,
                                  worker_id="w1@host", job_type="tests.task")


def test_two_tasks_in_two_threads_at_once_never_mix_their_lines(capture, tmp_path):
    handler = capture()
    both_started = threading.Barrier(2)

    def task(execution_id: str) -> None:
        with log_capture.capturing(attempt(execution_id)):
            both_started.wait()
            for i in range(300):
                app_log.info("%s %d", execution_id, i)

    threads = [threading.Thread(target=task, args=(e,)) for e in ("exec-a", "exec-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = spooled(handler, tmp_path)
    assert len(lines) == 600
    for execution_id in ("exec-a", "exec-b"):
        own = [doc for _, doc in lines if doc["chrono"]["execution_id"] == execution_id]
        assert [doc["message"] for doc in own] == [f"{execution_id} {i}" for i in range(300)]
        assert [doc["event"]["sequence"] for doc in own] == list(range(1, 301))


def test_a_line_carries_its_tags_level_logger_time_exception_and_a_deterministic_id(
        capture, tmp_path):
    handler = capture()
    with log_capture.capturing(attempt("exec-1", number=3)):
        app_log.warning("careful: %s", "x")
        try:
            raise KeyError("missing")
        except KeyError:
            app_log.exception("it broke")
    (first_id, first), (second_id, second) = spooled(handler, tmp_path)
    assert (first_id, second_id) == ("exec-1:3:1", "exec-1:3:2")
    assert first["message"] == "careful: x"
    assert first["log"]["level"] == "warning" and first["log"]["logger"] == "tests.app"
    assert first["chrono"] == {"tenant_id": "tenant-1", "job_id": "job-1",
                               "execution_id": "exec-1", "attempt": 3, "worker_id": "w1@host",
                               "job_type": "tests.task"}
    assert first["@timestamp"].endswith("Z") and first["data_stream"]["dataset"] == \
        "chrono.execution"
    assert second["error"]["type"] == "builtins.KeyError"
    assert "Traceback" in second["error"]["stack_trace"]


def test_nothing_is_captured_outside_an_attempt_nor_below_the_level(capture, tmp_path):
    handler = capture(level="WARNING")
    app_log.warning("no attempt runs")
    with log_capture.capturing(attempt("exec-1")):
        app_log.info("below the level")
        app_log.error("kept")
    assert [doc["message"] for _, doc in spooled(handler, tmp_path)] == ["kept"]


def test_over_the_attempt_cap_lines_are_dropped_and_a_closing_line_counts_them(capture,
                                                                                tmp_path):
    handler = capture(max_bytes=10 * 1024)
    with log_capture.capturing(attempt("exec-1")):
        for i in range(100):
            app_log.info("line %d %s", i, "x" * 100)
    lines = [doc for _, doc in spooled(handler, tmp_path)]
    kept = [doc for doc in lines if doc["log"]["logger"] == "tests.app"]
    closing = lines[-1]
    assert 0 < len(kept) < 100
    assert closing["log"] == {**closing["log"], "level": "warning", "logger": "chrono.logs"}
    assert closing["chrono"]["dropped_lines"] == 100 - len(kept)
    assert f"{100 - len(kept)} log lines" in closing["message"]
    assert [doc["event"]["sequence"] for doc in lines] == list(range(1, len(lines) + 1))


def test_a_full_process_buffer_drops_and_counts_rather_than_grow(capture, tmp_path):
    handler = capture(buffer_bytes=64 * 1024)
    with log_capture.capturing(attempt("exec-1")) as running:
        for i in range(1_000):
            app_log.info("line %d", i)
        assert handler.buffer.pending_bytes <= 64 * 1024
    assert running.dropped_lines > 0
    closing = spooled(handler, tmp_path)[-1][1]
    assert closing["chrono"]["dropped_lines"] == running.dropped_lines


def test_the_process_counts_what_it_captured_spooled_and_dropped_by_reason(capture, tmp_path):
    handler = capture(max_bytes=10 * 1024, buffer_bytes=20 * 1024)
    with log_capture.capturing(attempt("exec-1")) as capped:
        for i in range(100):
            app_log.info("line %d %s", i, "x" * 100)
    with log_capture.capturing(attempt("exec-2")) as flooded:
        for i in range(100):
            app_log.info("line %d %s", i, "y" * 100)
    before_flush = handler.buffer.counters.copy()
    assert before_flush.captured_lines == 0, "counted by the flusher, not the task's thread"
    lines = spooled(handler, tmp_path)
    counters = handler.buffer.counters
    assert counters.captured_lines == len(lines)
    assert counters.spooled_bytes == sum(path.stat().st_size for path in tmp_path.glob("*.ndjson"))
    assert counters.dropped_lines == {"attempt_limit": capped.dropped_lines,
                                      "buffer_full": flooded.dropped_lines, "spool_write": 0}
    assert capped.dropped_lines > 0 and flooded.dropped_lines > 0
    assert counters.dropped_bytes["attempt_limit"] == capped.dropped_bytes
    assert counters.dropped_bytes["buffer_full"] == flooded.dropped_bytes


def test_the_worker_series_get_what_changed_since_the_last_publish(capture, tmp_path):
    from prometheus_client import REGISTRY

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels or None) or 0.0

    handler = capture(max_bytes=2 * 1024)
    before = (sample("chrono_worker_log_lines_captured_total"),
              sample("chrono_worker_log_dropped_lines_total", reason="attempt_limit"),
              sample("chrono_worker_log_spooled_bytes_total"))
    with log_capture.capturing(attempt("exec-1")) as capped:
        for i in range(20):
            app_log.info("line %d %s", i, "x" * 100)
    handler.buffer.flush()
    handler.buffer.publish()
    handler.buffer.publish()  # nothing new: adds nothing
    captured = handler.buffer.counters.captured_lines
    assert sample("chrono_worker_log_lines_captured_total") - before[0] == captured
    assert (sample("chrono_worker_log_dropped_lines_total", reason="attempt_limit")
            - before[1]) == capped.dropped_lines
    assert (sample("chrono_worker_log_spooled_bytes_total") - before[2]
            == handler.buffer.counters.spooled_bytes)


def test_a_spool_that_cannot_be_written_counts_its_lines_dropped(capture, tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    handler = capture(spool_dir=blocked)
    with log_capture.capturing(attempt("exec-1")):
        app_log.info("lost")
        app_log.info("lost too")
    assert handler.buffer.flush() == 2
    counters = handler.buffer.counters
    assert counters.dropped_lines["spool_write"] == 2 and counters.spooled_bytes == 0
    assert counters.dropped_bytes["spool_write"] > 0


def test_a_long_message_is_cut_and_says_so(capture, tmp_path):
    handler = capture(line_bytes=300)
    with log_capture.capturing(attempt("exec-1")):
        app_log.info("y" * 5_000)
    (_, doc), = spooled(handler, tmp_path)
    assert doc["message"].startswith("y" * 300) and "cut at 300" in doc["message"]


def test_in_a_one_task_process_other_threads_lines_are_the_tasks_but_the_platforms_are_not(
        capture, tmp_path):
    handler = capture()
    log_capture.capture_process_wide()

    def from_a_thread() -> None:
        app_log.info("from the task's thread")
        logging.getLogger("chrono.leases").info("lease renewed")
        logging.getLogger("celery.redirected").warning("printed")

    with log_capture.capturing(attempt("exec-1")):
        thread = threading.Thread(target=from_a_thread)
        thread.start()
        thread.join()
    thread = threading.Thread(target=from_a_thread)  # no attempt runs now
    thread.start()
    thread.join()
    assert [doc["message"] for _, doc in spooled(handler, tmp_path)] == [
        "from the task's thread", "printed"]


def test_in_a_thread_pool_another_threads_lines_go_nowhere(capture, tmp_path):
    handler = capture()  # not process-wide: a thread pool runs several tasks at once
    with log_capture.capturing(attempt("exec-1")):
        thread = threading.Thread(target=lambda: app_log.info("whose?"))
        thread.start()
        thread.join()
        app_log.info("mine")
    assert [doc["message"] for _, doc in spooled(handler, tmp_path)] == ["mine"]
