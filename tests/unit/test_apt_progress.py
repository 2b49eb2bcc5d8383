"""apt-get's status lines (``APT::Status-Fd``) as the phases of ``chrono services up``'s
display, over recordings of apt 2.6 (``tests/unit/samples``: an ``apt-get update``, and the
install of a throwaway local package, whose download is the copy of the .deb)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chronocore.progress import PhaseProgress
from localservices.apt_progress import AptProgress, AptStatus, parse_status_line

SAMPLES = Path(__file__).parent / "samples"


class Recorded(PhaseProgress):
    """A display that keeps every state it was put in."""

    def __init__(self) -> None:
        super().__init__("apt-get", plain=lambda line: None)
        self.states: list[tuple[str | None, str, float | None]] = []

    def _report(self, new_phase: bool) -> None:
        self.states.append((self.phase, self.detail, self.percent))


def fed(sample: str) -> tuple[Recorded, AptProgress]:
    display = Recorded()
    progress = AptProgress(display)
    for line in (SAMPLES / sample).read_text().splitlines():
        progress.status_line(line)
    return display, progress


def test_an_update_downloads_with_a_spinner_until_apt_knows_it_is_done():
    display, progress = fed("apt-update.status")
    assert {phase for phase, _, _ in display.states} == {"downloading"}
    assert [percent for _, _, percent in display.states[:-1]] == [None] * 12
    assert display.states[-1] == ("downloading", "Retrieving file 15 of 15", 100.0)
    assert progress.errors == []


def test_an_install_downloads_then_runs_dpkg_with_its_percent_of_steps():
    display, progress = fed("apt-install.status")
    phases = [phase for phase, _, _ in display.states]
    assert phases == ["downloading"] * 3 + ["installing"] * 8
    installing = [(detail, percent) for phase, detail, percent in display.states
                  if phase == "installing"]
    assert installing[0] == ("Running dpkg", 0.0)
    assert installing[-1] == ("Installed chrono-ops17-sample (amd64)", 80.0)
    assert [p for _, p in installing] == sorted(p for _, p in installing)  # never backwards


def test_output_lines_are_the_detail_only_until_the_first_status_line():
    display = Recorded()
    progress = AptProgress(display)
    output = (SAMPLES / "apt-install.out").read_text().splitlines()
    progress.output_line(output[0])
    progress.status_line("dlstatus:1:0.0000:Retrieving file 1 of 1")
    for line in output[1:]:
        progress.output_line(line)
    assert display.states == [("starting", "Reading package lists...", None),
                              ("downloading", "Retrieving file 1 of 1", None)]


def test_dpkg_errors_are_kept_for_the_failure_message():
    display = Recorded()
    progress = AptProgress(display)
    progress.status_line("pmstatus:redis-server:40.0000:Configuring redis-server (amd64)")
    progress.status_line("pmerror:redis-server:60.0000:installed redis-server package "
                         "post-installation script subprocess returned error exit status 1")
    assert progress.errors == ["redis-server: installed redis-server package post-installation "
                               "script subprocess returned error exit status 1"]
    assert display.states[-1][0] == "failed"


@pytest.mark.parametrize("line, expected", [
    ("dlstatus:3:41.2000:Retrieving file 3 of 12 (5s remaining)",
     AptStatus("dlstatus", "3", 41.2, "Retrieving file 3 of 12 (5s remaining)")),
    ("pmstatus:libpq5:20.0000:Unpacking libpq5:amd64 (15.8-0+deb12u1)",
     AptStatus("pmstatus", "libpq5", 20.0, "Unpacking libpq5:amd64 (15.8-0+deb12u1)")),
    ("dlstatus:1:nan:Retrieving file 1 of 1", AptStatus("dlstatus", "1", None,
                                                        "Retrieving file 1 of 1")),
    ("dlstatus:1:inf:x", AptStatus("dlstatus", "1", None, "x")),
    ("pmstatus:p:250.0:x", AptStatus("pmstatus", "p", None, "x")),
    ("pmstatus:p:abc:x", None),
    ("pmstatus:p", None),
    ("media-change:disc:/cdrom:Insert the disc", None),
    ("Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]", None),
    ("", None),
])
def test_a_status_line_is_read_or_left_alone(line, expected):
    assert parse_status_line(line) == expected
