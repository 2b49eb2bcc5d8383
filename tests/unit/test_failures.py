"""What a failed attempt records for its tenant (type and message, no server path) and for
platform staff (the traceback)."""

from __future__ import annotations

import os
import sys

import pytest

from scheduler import failures
from scheduler.failures import SERVER_PATH, failure_error, failure_traceback


class CardDeclined(Exception):
    pass


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 -- any exception, as a task raises it
        return caught


@pytest.fixture
def server_directory(tmp_path, monkeypatch):
    """A directory code is imported from, as a worker's task modules are."""
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path / "srv")])
    failures._server_paths.cache_clear()
    yield tmp_path / "srv"
    failures._server_paths.cache_clear()


def test_a_builtin_exception_is_named_short_and_any_other_with_its_module():
    assert failure_error(ValueError("bad invoice")) == "ValueError: bad invoice"
    assert failure_error(CardDeclined("card 4242 declined")) == (
        "tests.unit.test_failures.CardDeclined: card 4242 declined")
    assert failure_error(KeyError("id")) == "KeyError: 'id'"
    assert failure_error(RuntimeError()) == "RuntimeError"


def test_paths_into_the_servers_directories_are_hidden_whole(server_directory):
    module = server_directory / "billing" / "tasks.py"
    error = failure_error(FileNotFoundError(2, "No such file or directory", str(module)))
    assert error == f"FileNotFoundError: [Errno 2] No such file or directory: '{SERVER_PATH}'"
    error = failure_error(ValueError(f"in {module}, line 3 (and {os.getcwd()}/x.cfg)"))
    assert error == f"ValueError: in {SERVER_PATH}, line 3 (and {SERVER_PATH})"
    # A name that only starts like a server directory is not one of its paths.
    assert failure_error(ValueError(f"{server_directory}x")) == f"ValueError: {server_directory}x"


def test_a_message_that_cannot_be_written_still_names_the_type():
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    assert failure_error(Broken()).endswith(".Broken: (the exception's message could not be "
                                            "written)")


def test_the_error_is_bounded_from_its_head_and_the_traceback_from_its_tail():
    assert len(failure_error(ValueError("x" * 10_000))) == failures.ERROR_MAX_CHARS
    trace = failure_traceback(raised(ValueError("y" * 40_000 + "end")))
    assert len(trace) == failures.TRACEBACK_MAX_CHARS and trace.endswith("end\n")


def test_the_traceback_holds_the_frames_and_the_chained_cause():
    try:
        try:
            raise OSError("disk")
        except OSError as cause:
            raise CardDeclined("card declined") from cause
    except CardDeclined as exc:
        trace = failure_traceback(exc)
    assert trace.startswith("Traceback (most recent call last):")
    assert "OSError: disk" in trace and __file__ in trace
    assert trace.rstrip().endswith("tests.unit.test_failures.CardDeclined: card declined")
