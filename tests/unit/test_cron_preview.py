"""``chrono cron-preview``: one ISO 8601 time per line, DST notes, --hash-key and --explain."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from scheduler.cron import parse_cron


def preview(*args: str) -> tuple[list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("cron_preview", *args, stdout=out, stderr=err)
    return out.getvalue().splitlines(), err.getvalue()


def test_lines_around_the_transitions_say_why() -> None:
    lines, _ = preview("30 2 * * *", "--tz", "America/New_York", "-n", "2",
                       "--after", "2026-03-07T12:00:00-05:00")
    assert lines == ["2026-03-08T03:00:00-04:00  # after the gap", "2026-03-09T02:30:00-04:00"]
    lines, _ = preview("0 1 * * *", "--tz", "America/New_York", "-n", "1",
                       "--after", "2026-10-31T12:00:00-04:00")
    assert lines == ["2026-11-01T01:00:00-04:00  # repeated hour: once"]


def test_hash_key_gives_one_jobs_times_and_without_it_a_note() -> None:
    lines, err = preview("H H * * *", "-n", "1", "--hash-key", "job-1",
                         "--after", "2026-01-01T00:00:00+00:00")
    schedule = parse_cron("H H * * *", "UTC", "job-1")
    assert lines == [f"2026-01-01T{schedule.hours[0]:02}:{schedule.minutes[0]:02}:00+00:00"]
    assert err == ""
    _, err = preview("H H * * *", "-n", "1")
    assert "--hash-key" in err


def test_explain_prints_words_before_the_times() -> None:
    lines, _ = preview("0 9 * * 5#3", "--explain", "-n", "1",
                       "--after", "2026-01-01T00:00:00+00:00")
    assert lines[0].startswith("# At minute 0, hour 9")
    assert "# on the third Friday of the month;" in lines
    assert lines[-1] == "2026-01-16T09:00:00+00:00"


def test_a_bad_expression_names_its_field() -> None:
    with pytest.raises(CommandError, match="day-of-week field '5#9'"):
        preview("0 9 * * 5#9")


def test_a_calendar_file_leaves_out_its_days(tmp_path) -> None:
    weekend = tmp_path / "weekend.json"
    # As GET /api/v1/calendars/{name}/ returns it: the API's own fields are ignored.
    weekend.write_text(json.dumps({"calendar_id": "ignored", "name": "weekend", "jobs": 0,
                                   "timezone": "America/New_York", "rules": ["* * SAT,SUN"]}))
    christmas = tmp_path / "christmas.json"
    christmas.write_text(json.dumps([{"name": "christmas", "timezone": "Asia/Tokyo",
                                      "dates": ["2026-12-24"]}]))
    lines, _ = preview("0 9 * * *", "--tz", "America/New_York", "-n", "3", "--after",
                       "2026-12-23T00:00:00-05:00", "--calendar", str(weekend),
                       "--calendar", str(christmas))
    # 09:00 New York on the 23rd is 23:00 Tokyo (kept); on the 24th 23:00 Tokyo, the 24th
    # there (left out); the 26th and 27th are the weekend.
    assert lines == ["2026-12-23T09:00:00-05:00", "2026-12-25T09:00:00-05:00",
                     "2026-12-28T09:00:00-05:00"]


@pytest.mark.parametrize(("content", "words"), [
    ('{"name": "x", "timezone": "Mars/Base"}', "timezone:"),
    ('[{"name": "x"}, {"name": "y", "dates": ["soon"]}]', "[1]: dates[0]:"),
    ("not json", "not JSON"),
])
def test_a_bad_calendar_file_names_the_file_and_the_field(tmp_path, content, words) -> None:
    path = tmp_path / "calendar.json"
    path.write_text(content)
    with pytest.raises(CommandError, match="--calendar") as error:
        preview("0 9 * * *", "--calendar", str(path))
    assert words in str(error.value)


def test_a_missing_calendar_file_is_named(tmp_path) -> None:
    with pytest.raises(CommandError, match="cannot read it"):
        preview("0 9 * * *", "--calendar", str(tmp_path / "none.json"))
