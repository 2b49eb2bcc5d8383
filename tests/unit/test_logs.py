"""The long-running processes' log options (chronocore/logs.py): levels and JSON lines."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

from chronocore import logs


def test_json_lines_carry_the_record_fields():
    record = logging.LogRecord("chrono.beat", logging.WARNING, __file__, 1, "lost %s shards",
                               (3,), None)
    line = json.loads(logs.formatter("json").format(record))
    assert (line["level"], line["logger"], line["message"]) == ("WARNING", "chrono.beat",
                                                                "lost 3 shards")
    assert line["timestamp"] and isinstance(line["process"], int) and line["thread"]


def test_a_traceback_goes_into_the_json_object():
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("chrono.reaper", logging.ERROR, __file__, 1, "pass failed",
                                   (), sys.exc_info())
    line = json.loads(logs.formatter("json").format(record))
    assert "ValueError: boom" in line["exc_info"]


def test_the_options_parse_and_refuse_unknown_values():
    parser = argparse.ArgumentParser()
    logs.add_logging_arguments(parser, aliases=("-l",))
    assert vars(parser.parse_args(["--log-level", "debug", "--log-format", "json"])) == {
        "log_level": "DEBUG", "log_format": "json"}
    assert parser.parse_args(["-l", "warning"]).log_level == "WARNING"
    assert parser.parse_args(["--loglevel", "ERROR"]).log_level == "ERROR"
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "xml"])


def test_configure_sets_chronos_level_and_one_root_handler():
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        logs.configure("DEBUG", "json")
        logs.configure("DEBUG", "json")  # again: still one handler of its own
        own = [h for h in root.handlers if getattr(h, "_chrono_root", False)]
        assert len(own) == 1 and own[0].level == logging.WARNING
        assert logging.getLogger("chrono").level == logging.DEBUG
    finally:
        root.handlers = before
        logging.getLogger("chrono").setLevel(logging.INFO)


def test_current_reads_back_the_level_and_format_configure_set():
    # What a worker's engine child is started with, to log as the worker does.
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        logs.configure("WARNING", "json")
        assert logs.current() == ("WARNING", "json")
        logs.configure("DEBUG", "plain")
        assert logs.current() == ("DEBUG", "plain")
    finally:
        root.handlers = before
        logging.getLogger("chrono").setLevel(logging.INFO)
