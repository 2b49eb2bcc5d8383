"""``chrono services up --no-progress``: apt's and Maven's phases as log lines on a terminal
too, as off one; the option belongs to ``up`` alone."""

from __future__ import annotations

import pytest

import localservices
from localservices import lifecycle


def test_up_without_progress_hands_it_down_to_apt_and_the_launcher_build(monkeypatch):
    calls: list[bool] = []
    monkeypatch.setattr(lifecycle, "up", lambda *, progress_drawn=True: calls.append(
        progress_drawn))
    assert lifecycle.main(["up", "--no-progress"]) == 0
    assert lifecycle.main(["up"]) == 0
    assert calls == [False, True]


def test_the_search_service_builds_its_launcher_as_it_was_told():
    config = localservices.ServicesConfig.from_env()
    drawn = {s.name: getattr(s, "progress_drawn", None)
             for s in localservices.registered_services(config, progress_drawn=False)}
    assert drawn["search"] is False
    assert localservices.registered_services(config)[-1].progress_drawn is True


@pytest.mark.parametrize("command", ["down", "status", "rotate"])
def test_no_progress_is_refused_for_the_commands_that_draw_none(command, capsys):
    with pytest.raises(SystemExit) as refused:
        lifecycle.main([command, "--no-progress"])
    assert refused.value.code == 2
    assert "--no-progress is for up" in capsys.readouterr().err
