"""Maven's batch-mode output as the phases of ``chrono services up``'s display while it builds
the search launcher, over recordings of Maven 3.8.7 (``tests/unit/samples``: a build that
downloads two artifacts, and one that fails to compile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chronocore.progress import PhaseProgress
from localservices.maven_progress import MavenProgress, plain_text, size_bytes

SAMPLES = Path(__file__).parent / "samples"


class Recorded(PhaseProgress):
    def __init__(self) -> None:
        super().__init__("mvn package", plain=lambda line: None)
        self.states: list[tuple[str | None, str]] = []

    def _report(self, new_phase: bool) -> None:
        self.states.append((self.phase, self.detail))


def fed(sample: str) -> tuple[Recorded, MavenProgress]:
    display = Recorded()
    progress = MavenProgress(display)
    for line in (SAMPLES / sample).read_text().splitlines():
        progress.output_line(line)
    return display, progress


def phases(display: Recorded) -> list[str | None]:
    seen: list[str | None] = []
    for phase, _ in display.states:
        if not seen or seen[-1] != phase:
            seen.append(phase)
    return seen


def test_each_plugin_execution_is_a_phase_and_the_downloads_are_counted():
    display, progress = fed("mvn-build.log")
    assert phases(display) == ["resolving", "clean", "resources", "compile", "testResources",
                               "testCompile", "test", "jar", "copy-dependencies", "built"]
    assert (progress.downloads, progress.downloaded_bytes) == (2, 1_300 + 5_200)
    assert ("compile", "downloading plexus-compiler-manager-2.15.0.jar (1 file, 1.3 kB "
            "downloaded)") in display.states
    assert display.states[-1] == ("built", "2 files, 6.5 kB downloaded")
    assert progress.failure() == ""


def test_a_failed_build_reports_the_compiler_error_without_mavens_advice():
    display, progress = fed("mvn-error.log")
    assert phases(display)[-2:] == ["compile", "failed"]
    failure = progress.failure().splitlines()
    assert failure[0] == "COMPILATION ERROR :"
    assert failure[1].endswith("ChronoAuthPlugin.java:[162,1] class, interface, enum, or "
                               "record expected")
    assert failure[2].startswith("Failed to execute goal org.apache.maven.plugins:"
                                 "maven-compiler-plugin:3.13.0:compile")
    assert len(failure) == 3  # the cause said once; no "-> [Help 1]", no cwiki link


def test_maven_3_9s_short_plugin_names_are_phases_too():
    display = Recorded()
    progress = MavenProgress(display)
    progress.output_line("[INFO] --- compiler:3.13.0:compile (default-compile) @ launcher ---")
    progress.output_line("[INFO] --- dependency:3.8.1:copy-dependencies @ launcher ---")
    assert phases(display) == ["compile", "copy-dependencies"]


@pytest.mark.parametrize("line, expected", [
    ("\x1b[0m\x1b[0m[INFO] Scanning for projects...", ("INFO", "Scanning for projects...")),
    ("[ERROR] ", ("ERROR", "")),
    ("[WARNING] Using platform encoding", ("WARNING", "Using platform encoding")),
    ("plain words", ("", "plain words")),
])
def test_colours_and_levels_are_taken_off(line, expected):
    assert plain_text(line) == expected


def test_sizes_are_maven_s_decimal_units():
    assert [size_bytes(*pair) for pair in (("790", "B"), ("1.3", "kB"), ("2,048", "kB"),
                                            ("5.2", "MB"))] == [790, 1_300, 2_048_000, 5_200_000]
