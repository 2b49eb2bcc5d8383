"""The phase display of long commands (``chronocore.progress.phase_progress``): a live line on
a terminal; off one (CI, a pipe, a log file), a plain line per phase, per tenth of its
percent, and for a changed detail at most once per interval."""

from __future__ import annotations

import io

from rich.console import Console

from chronocore.progress import PLAIN_INTERVAL_S, PhaseProgress, phase_progress


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_the_phases_are_plain_lines_and_nothing_is_drawn():
    lines: list[str] = []
    screen = io.StringIO()
    with phase_progress("apt-get install", plain=lines.append,
                        console=Console(file=screen)) as display:
        display.update("downloading", detail="Retrieving file 1 of 2")
        display.update("installing", detail="Unpacking redis-server (amd64)", percent=20.0)
    assert lines == ["apt-get install: downloading: Retrieving file 1 of 2",
                     "apt-get install: installing 20%: Unpacking redis-server (amd64)"]
    assert screen.getvalue() == ""


def test_a_percent_is_logged_once_per_tenth_and_again_in_each_new_phase():
    lines: list[str] = []
    display = PhaseProgress("apt-get install", plain=lines.append, clock=Clock())
    for percent in (0.0, 3.0, 9.9, 10.0, 14.0, 35.0, 36.0):
        display.update("installing", percent=percent)
    display.update("configuring", percent=0.0)
    assert [line.split(": ", 1)[1] for line in lines] == [
        "installing 0%", "installing 10%", "installing 35%", "configuring 0%"]


def test_a_new_detail_alone_is_logged_at_most_once_per_interval():
    lines: list[str] = []
    clock = Clock()
    display = PhaseProgress("mvn package", plain=lines.append, clock=clock)
    display.update("compile", detail="downloading a.jar")
    for name in ("b.jar", "c.jar", "d.jar"):
        clock.now += PLAIN_INTERVAL_S / 3
        display.update("compile", detail=f"downloading {name}")
    clock.now += PLAIN_INTERVAL_S
    display.update("compile", detail="downloading d.jar")  # the same: nothing new to say
    assert lines == ["mvn package: compile: downloading a.jar",
                     "mvn package: compile: downloading d.jar"]


def test_a_percent_outside_0_to_100_is_held_to_it_and_a_phase_without_detail_clears_it():
    lines: list[str] = []
    display = PhaseProgress("x", plain=lines.append, clock=Clock())
    display.update("downloading", detail="file 1", percent=140.0)
    assert display.percent == 100.0
    display.update("installing")
    assert (display.detail, lines[-1]) == ("", "x: installing")


def test_on_a_terminal_the_phase_is_drawn_as_it_is_and_nothing_is_logged():
    lines: list[str] = []
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    with phase_progress("apt-get install", plain=lines.append, console=console) as display:
        display.update("installing", detail="Unpacking redis-server (amd64)", percent=40.0)
    drawn = screen.getvalue()
    assert lines == []
    assert "apt-get install" in drawn and "━" in drawn  # the title and the bar
    assert "installing 40%: Unpacking redis-server (amd64)" in drawn


def test_the_commands_own_text_is_drawn_as_it_is_not_as_rich_markup():
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    with phase_progress("apt-get update", plain=print, console=console) as display:
        display.update("downloading", detail="Get:1 http://deb.debian.org [151 kB] [bold]")
    assert "Get:1 http://deb.debian.org [151 kB] [bold]" in screen.getvalue()


def test_without_progress_enabled_a_terminal_gets_plain_lines_too():
    lines: list[str] = []
    console = Console(file=io.StringIO(), force_terminal=True)
    with phase_progress("mvn package", plain=lines.append, console=console,
                        enabled=False) as display:
        display.update("compile")
    assert lines == ["mvn package: compile"] and console.file.getvalue() == ""
