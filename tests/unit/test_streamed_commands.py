"""Driving the long installs of ``chrono services up`` while they run
(``localservices.streamed``), with throwaway commands in place of apt-get and Maven: a script
that writes apt-style status lines to the descriptor it is given, one that prints a recorded
Maven build. Nothing is installed or built."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localservices import packages, search
from localservices.errors import ServiceError, ServiceStartError
from localservices.streamed import STATUS_FD, run_streamed

SAMPLES = Path(__file__).parent / "samples"

# Prints its output and writes status lines to the descriptor of "-o APT::Status-Fd=N", in the
# order apt does (the status of each step, then its words), flushed and paced like a real run.
FAKE_APT_GET = f'''\
import os, sys, time
argv = sys.argv[1:]
option = argv.index("-o")
fd = int(argv[option + 1].split("=", 1)[1])
status = {(SAMPLES / "apt-install.status").read_text()!r}.splitlines()
output = {(SAMPLES / "apt-install.out").read_text()!r}.splitlines(keepends=True)
for index, line in enumerate(status):
    os.write(fd, (line + "\\n").encode())
    if index < len(output):
        sys.stdout.write(output[index]); sys.stdout.flush()
    time.sleep(0.01)
sys.stdout.writelines(output[len(status):])
print("args:", " ".join(argv[:option] + argv[option + 2:]))
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
'''


def script(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\n{text}")
    path.chmod(0o755)
    return path


def test_output_and_status_lines_reach_their_handlers_as_the_command_writes_them(tmp_path):
    writer = script(tmp_path, "writer", (
        "import os, sys, time\n"
        "fd = int(sys.argv[1])\n"
        "sys.stdout.write('first\\n'); sys.stdout.flush()\n"
        "os.write(fd, b'pmstatus:p:10.0:Unpacking p\\n')\n"
        "time.sleep(0.3)\n"
        "sys.stdout.buffer.write(b'(db ... 5%\\r(db ... 10%\\r\\n'); sys.stdout.flush()\n"
        "sys.stdout.buffer.write('na\\u00efve'.encode()[:3]); sys.stdout.flush()\n"
        "time.sleep(0.05)\n"
        "sys.stdout.buffer.write('na\\u00efve'.encode()[3:] + b'\\n')\n"
        "sys.stderr.write('to stderr, no newline')\n"
        "sys.exit(3)\n"))
    seen: list[tuple[float, str, str]] = []
    started = time.monotonic()

    def recorder(kind: str):
        return lambda line: seen.append((time.monotonic() - started, kind, line))

    result = run_streamed([str(writer), STATUS_FD], on_output=recorder("out"),
                          on_status=recorder("status"), timeout_s=30)
    assert result.returncode == 3
    assert sorted((kind, line) for _, kind, line in seen) == sorted([
        ("out", "first"), ("status", "pmstatus:p:10.0:Unpacking p"), ("out", "(db ... 5%"),
        ("out", "(db ... 10%"), ("out", "naïve"), ("out", "to stderr, no newline")])
    arrival = {line: at for at, _, line in seen}
    assert arrival["pmstatus:p:10.0:Unpacking p"] < arrival["(db ... 5%"] - 0.2  # while it ran
    assert "first\n" in result.stdout and result.stdout.endswith("to stderr, no newline")


def test_a_command_past_its_timeout_is_stopped_with_its_children_and_reported(tmp_path):
    pid_file = tmp_path / "child.pid"
    sleeper = script(tmp_path, "sleeper", (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen(['sleep', '60'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"))
    started = time.monotonic()
    with pytest.raises(ServiceError, match="did not finish within 1 s"):
        run_streamed([str(sleeper)], on_output=lambda line: None, timeout_s=1)
    assert time.monotonic() - started < 15
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.05)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_handler_that_fails_stops_the_command(tmp_path):
    chatty = script(tmp_path, "chatty", "import time\nprint('one', flush=True)\ntime.sleep(60)\n")

    def refuse(line: str) -> None:
        raise RuntimeError(f"cannot take {line!r}")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="cannot take 'one'"):
        run_streamed([str(chatty)], on_output=refuse, timeout_s=60)
    assert time.monotonic() - started < 15


def test_a_command_that_cannot_start_is_a_service_error(tmp_path):
    with pytest.raises(ServiceError, match="could not run"):
        run_streamed([str(tmp_path / "missing")], on_output=print, on_status=print,
                     timeout_s=5)


def test_the_status_descriptor_is_closed_here_once_the_command_has_it(tmp_path):
    before = set(os.listdir("/proc/self/fd"))
    run_streamed([sys.executable, "-c", "pass", STATUS_FD], on_output=print,
                 on_status=print, timeout_s=30)
    assert set(os.listdir("/proc/self/fd")) <= before


def test_apt_get_runs_with_its_status_pipe_and_its_phases_logged_off_a_terminal(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(packages, "APT_GET", str(script(tmp_path, "apt-get", FAKE_APT_GET)))
    with caplog.at_level(logging.INFO, logger="localservices"):
        result = packages._apt_get("install", "-y", "chrono-ops17-sample")
    assert result.returncode == 0
    assert "args: install -y chrono-ops17-sample" in result.stdout
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == "running apt-get install -y chrono-ops17-sample"
    assert "apt-get install: starting: Reading package lists..." not in lines  # status came first
    assert "apt-get install: downloading: Retrieving file 1 of 1" in lines
    assert "apt-get install: installing 0%: Running dpkg" in lines
    assert lines[-2:] == ["apt-get install: installing 80%: Installed chrono-ops17-sample "
                          "(amd64)", "apt-get install: done 100%"]
    assert not any("\x1b" in line for line in lines)


def test_a_failed_apt_get_ends_its_output_with_dpkgs_errors(tmp_path, monkeypatch):
    failing = FAKE_APT_GET.replace(
        'sys.exit(', 'os.write(fd, b"pmerror:redis-server:60.0:subprocess returned error exit '
                     'status 1\\n"); sys.exit(')
    monkeypatch.setattr(packages, "APT_GET", str(script(tmp_path, "apt-get", failing)))
    monkeypatch.setenv("FAKE_EXIT", "100")
    result = packages._apt_get("install", "-y", "redis-server")
    assert result.returncode == 100
    assert packages.output_tail(result).endswith(
        "dpkg: redis-server: subprocess returned error exit status 1")


def test_the_launcher_build_shows_mavens_phases_and_stamps_the_build(tmp_path, monkeypatch,
                                                                      caplog):
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "target").mkdir()
    mvn = script(tmp_path, "mvn", (
        "import sys\n"
        f"sys.stdout.write(open({str(SAMPLES / 'mvn-build.log')!r}).read())\n"))
    monkeypatch.setattr(search, "MAVEN_BUILD", (str(mvn), "-B", "clean", "package"))
    with caplog.at_level(logging.INFO, logger="localservices"):
        search.build_launcher(tmp_path)
    assert (tmp_path / "target" / search.BUILD_STAMP).exists()
    lines = [record.getMessage() for record in caplog.records]
    assert "mvn package: compile: maven-compiler-plugin" in lines
    assert "mvn package: built 100%: 2 files, 6.5 kB downloaded" in lines
    assert lines[-1].startswith("built the search launcher in")


def test_a_failed_launcher_build_says_what_the_compiler_said(tmp_path, monkeypatch):
    (tmp_path / "pom.xml").write_text("<project/>")
    mvn = script(tmp_path, "mvn", (
        "import sys\n"
        f"sys.stdout.write(open({str(SAMPLES / 'mvn-error.log')!r}).read())\n"
        "sys.exit(1)\n"))
    monkeypatch.setattr(search, "MAVEN_BUILD", (str(mvn), "-B", "clean", "package"))
    with pytest.raises(ServiceStartError) as failed:
        search.build_launcher(tmp_path)
    message = str(failed.value)
    assert "ChronoAuthPlugin.java:[162,1] class, interface, enum, or record expected" in message
    assert "[Help 1]" not in message and "cwiki" not in message
    assert not (tmp_path / "target" / search.BUILD_STAMP).exists()


def test_the_real_commands_are_asked_for_the_lines_the_parsers_read():
    """This machine's apt-get takes the status descriptor option; Maven is not quiet (-q
    would print nothing but errors) and runs in batch mode (no transfer bars)."""
    assert "-q" not in search.MAVEN_BUILD and "-B" in search.MAVEN_BUILD
    accepted = subprocess.run(["apt-get", "-o", "APT::Status-Fd=2", "--version"],
                              capture_output=True, text=True, check=False)
    assert accepted.returncode == 0 and accepted.stdout.startswith("apt ")
