"""deploy/systemd's units and deploy/make-env (docs/production.md): the units verify with
``systemd-analyze verify``, every ExecStart is a real ``chrono`` command whose arguments its own
parser accepts, the long-running ones restart and keep the beat off the workers' cores, and the
environment file make-env writes holds generated secrets that Chrono's production settings accept
(``chrono check --deploy`` included) and refuses default credentials."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from chronocore.config import get_config, load_config
from localservices.packages import ensure_packages
from localservices.processes import REPO_ROOT

UNITS = REPO_ROOT / "deploy" / "systemd"
MAKE_ENV = REPO_ROOT / "deploy" / "make-env"
INSTALLED_CHRONO = "/opt/chrono/venv/bin/chrono"
LONG_RUNNING = ("chrono-web.service", "chrono-beat@.service", "chrono-worker@.service",
                "chrono-reaper.service", "chrono-indexer.service",
                "chrono-workflow-engine.service")


def parse_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file, each a list of (key, value): keys repeat (ExecStart=)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
            continue
        key, _, value = line.partition("=")
        current.append((key, value))
    return sections


def values(path: Path, section: str, key: str) -> list[str]:
    return [v for k, v in parse_unit(path).get(section, []) if k == key]


@pytest.fixture(scope="module")
def systemd_analyze() -> str:
    """Debian's systemd-analyze (in the systemd package), installed when missing."""
    ensure_packages(["systemd"])
    return shutil.which("systemd-analyze") or pytest.fail("systemd-analyze is not installed")


def _verify(systemd_analyze: str, directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [systemd_analyze, "verify", "--man=no",
         *sorted(str(p) for p in directory.iterdir())],
        capture_output=True, text=True, timeout=120)


def _units_for_this_machine(tmp_path: Path) -> Path:
    """The units with the installed `chrono` replaced by this checkout's: verify checks that
    every ExecStart binary exists and is executable."""
    directory = tmp_path / "units"
    directory.mkdir()
    for unit in UNITS.iterdir():
        text = unit.read_text().replace(INSTALLED_CHRONO, str(Path(sys.prefix) / "bin" / "chrono"))
        (directory / unit.name).write_text(text)
    return directory


def test_every_unit_verifies_without_a_warning(systemd_analyze, tmp_path):
    result = _verify(systemd_analyze, _units_for_this_machine(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == "", result.stdout + result.stderr
    assert {p.name for p in UNITS.iterdir()} >= {*LONG_RUNNING, "chrono.target",
                                                  "chrono-migrate.service"}


def test_verify_would_catch_a_misspelt_setting(systemd_analyze, tmp_path):
    directory = _units_for_this_machine(tmp_path)
    beat = directory / "chrono-beat@.service"
    beat.write_text(beat.read_text().replace("CPUAffinity=", "CPUAffinty="))
    result = _verify(systemd_analyze, directory)
    assert "Unknown key 'CPUAffinty'" in result.stderr


# What an operator may put in chrono.env for the units' own variables.
OVERRIDES = {"LOG_ARGS": "--log-level DEBUG --log-format json",
             "WORKER_ARGS": "--pool threads --concurrency 64 --include tests.e2e.tasks",
             "WEB_BIND": "0.0.0.0:8080", "WEB_ARGS": "--workers 4 --threads 8"}


def _exec_argv(unit: Path, line: str, overrides: dict[str, str]) -> list[str]:
    """An ExecStart's argv as systemd would run it for instance `billing` on host `host-a`,
    with the unit's Environment= defaults under ``overrides`` (``${X}`` one word, ``$X`` split
    on spaces)."""
    defaults = {}
    for assignment in values(unit, "Service", "Environment"):
        name, _, value = assignment.strip('"').partition("=")
        defaults[name] = overrides.get(name, value)
    words = []
    for word in shlex.split(line.replace("%i", "billing").replace("%H", "host-a")):
        if word.startswith("${"):
            words.append(defaults[word[2:-1]])
        elif word.startswith("$"):
            words.extend(defaults[word[1:]].split())
        else:
            words.append(word)
    return words


def test_every_exec_start_is_a_chrono_command_whose_parser_accepts_its_arguments():
    from django.core.management import CommandError, get_commands, load_command_class

    commands = get_commands()
    checked = []
    for unit, overrides in ((u, o) for u in sorted(UNITS.glob("*.service"))
                            for o in ({}, OVERRIDES)):
        for line in values(unit, "Service", "ExecStart"):
            program, command, *arguments = _exec_argv(unit, line, overrides)
            assert program == INSTALLED_CHRONO, (unit.name, program)
            name = command.replace("-", "_")
            assert name in commands, f"{unit.name}: `chrono {command}` is no chrono command"
            parser = load_command_class(commands[name], name).create_parser("chrono", name)
            try:
                parser.parse_args(arguments)
            except (SystemExit, CommandError):
                pytest.fail(f"{unit.name}: `chrono {command} {' '.join(arguments)}` is refused")
            if not overrides:
                checked.append(command)
    assert sorted(checked) == sorted(["beat", "worker", "web", "reaper", "indexer",
                                      "workflow-engine", "migrate", "collectstatic"])


def test_long_running_units_restart_and_the_beat_keeps_a_core_the_workers_leave_alone():
    for name in LONG_RUNNING:
        unit = UNITS / name
        assert values(unit, "Service", "Restart") == ["always"], name
        assert values(unit, "Service", "EnvironmentFile")[0] == "/etc/chrono/chrono.env", name
        assert values(unit, "Service", "User") == ["chrono"], name
        assert values(unit, "Install", "WantedBy") == ["chrono.target"], name
    assert values(UNITS / "chrono-beat@.service", "Service", "CPUAffinity") == ["0"]
    worker_cpus = values(UNITS / "chrono-worker@.service", "Service", "CPUAffinity")
    assert worker_cpus == ["1-1023"]


def _read_env(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line[0] == "#"]
    return {name: value.strip('"') for name, value in (line.split("=", 1) for line in lines)}


def _make_env(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(MAKE_ENV), *arguments], capture_output=True,
                          text=True, timeout=60, cwd=REPO_ROOT)


def test_make_env_writes_generated_secrets_that_production_settings_accept(tmp_path,
                                                                          services_up):
    output = tmp_path / "etc" / "chrono.env"
    result = _make_env("systemd", "--output", str(output), "--allowed-hosts", "chrono.test",
                       "--from-credentials", str(get_config().credentials_path),
                       "--static-root", str(tmp_path / "static"))
    assert result.returncode == 0, result.stderr
    assert stat.S_IMODE(output.stat().st_mode) == 0o640
    environment = _read_env(output)
    config = load_config(environment)
    assert len(config.secret_key) >= 80 and config.allowed_hosts == ("chrono.test",)
    assert config.metrics_bearer_token and config.metrics_bearer_token != config.secret_key
    assert not config.credentials_path.exists()  # every URL carries its own credentials
    assert all("@" in url for url in config.service_urls().values())

    again = _make_env("systemd", "--output", str(output), "--allowed-hosts", "chrono.test",
                      "--from-credentials", str(get_config().credentials_path))
    assert again.returncode != 0 and "exists" in again.stderr
    assert _read_env(output) == environment

    check = subprocess.run(
        [sys.executable, "-m", "chronoadmin.cli", "check", "--deploy", "--fail-level",
         "WARNING"], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={"PATH": os.environ["PATH"], **environment})
    assert check.returncode == 0, check.stdout + check.stderr
    assert "System check identified no issues" in check.stdout


def test_make_env_refuses_urls_without_a_password_or_with_a_default_one(tmp_path):
    output = tmp_path / "chrono.env"
    result = _make_env("systemd", "--output", str(output), "--allowed-hosts", "chrono.test",
                       "--database-url", "postgresql://chrono@db.internal/chrono",
                       "--redis-url", "redis://:secret@redis.internal:6379/0",
                       "--broker-url", "amqp://guest:guest@rabbit.internal//",
                       "--search-url", "https://chrono:Xq3-long-and-random@search.internal")
    assert result.returncode != 0
    assert "DATABASE_URL has no password" in result.stderr
    assert "REDIS_URL has a well-known default password" in result.stderr
    assert "BROKER_URL has a well-known default password" in result.stderr
    assert "SEARCH_URL" not in result.stderr
    assert not output.exists()


def test_make_env_compose_generates_every_password(tmp_path):
    output = tmp_path / ".env"
    assert _make_env("compose", "--output", str(output)).returncode == 0
    generated = _read_env(output)
    assert set(generated) == {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "RABBITMQ_PASSWORD",
                              "ELASTIC_PASSWORD", "CHRONO_SECRET_KEY",
                              "CHRONO_METRICS_BEARER_TOKEN"}
    assert len(set(generated.values())) == len(generated)
    assert all(len(value) >= 80 for value in generated.values())


RUN_UNIT = REPO_ROOT / "deploy" / "run-unit"


def _units_with_env_dir(tmp_path: Path, environment: dict[str, str]) -> Path:
    """The units with /etc/chrono/ moved to a scratch directory holding ``environment`` as
    chrono.env, and the installed `chrono` replaced by this checkout's."""
    directory = _units_for_this_machine(tmp_path)
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "chrono.env").write_text("".join(f"{k}={v}\n" for k, v in environment.items()))
    for unit in directory.iterdir():
        unit.write_text(unit.read_text().replace("/etc/chrono/", f"{etc}/"))
    return directory


def _dry_run(unit: Path, *instance: str) -> dict:
    import json

    result = subprocess.run([sys.executable, str(RUN_UNIT), "--dry-run", str(unit), *instance],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_run_unit_applies_the_units_environment_specifiers_and_process_settings(tmp_path):
    directory = _units_with_env_dir(tmp_path, {"WORKER_ARGS": "--pool threads -c 8",
                                               "WEB_BIND": "0.0.0.0:8080"})
    (tmp_path / "etc" / "worker-billing.env").write_text("CHRONO_METRICS_PORT=9105\n")
    chrono = str(Path(sys.prefix) / "bin" / "chrono")
    worker = _dry_run(directory / "chrono-worker@.service", "billing")
    host = os.uname().nodename
    assert worker["commands"] == [[chrono, "worker", "--queues", "billing", "--hostname",
                                   f"billing@{host}", "--pool", "threads", "-c", "8"]]
    assert worker["environment"]["CHRONO_METRICS_PORT"] == "9105"
    assert (worker["User"], worker["CPUAffinity"]) == ("chrono", "1-1023")
    web = _dry_run(directory / "chrono-web.service")
    # The file's WEB_BIND wins over the unit's Environment= default; WEB_ARGS keeps it.
    assert web["commands"] == [[chrono, "web", "0.0.0.0:8080", "--workers", "2", "--threads",
                                "4"]]
    beat = _dry_run(directory / "chrono-beat@.service", "2")
    assert beat["commands"] == [[chrono, "beat", "--replica-id", f"{host}-2"]]
    assert "CHRONO_METRICS_PORT" not in beat["environment"]  # no beat-2.env: none
    refused = subprocess.run([sys.executable, str(RUN_UNIT), "--dry-run",
                              str(directory / "chrono-beat@.service")],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "is a template: give the instance" in refused.stderr


def test_the_workers_and_the_indexer_may_write_the_execution_log_spool_under_protect_system(
        tmp_path):
    """ProtectSystem=strict makes every path read-only but the unit's StateDirectory=: on a
    fresh host under systemd (docs/production.md, "On a fresh machine") the units without it
    lost every execution's log lines ("Read-only file system"); run-unit, which does not
    sandbox, had not shown it."""
    spool = load_config({"CHRONO_CREDENTIALS_FILE": "/nonexistent/x"}).log_spool_path
    directory = _units_with_env_dir(tmp_path, {})
    for name in ("chrono-worker@.service", "chrono-indexer.service"):
        unit = UNITS / name
        assert values(unit, "Service", "ProtectSystem") == ["strict"]
        assert [Path("/var/lib") / d for d in values(unit, "Service", "StateDirectory")] == [spool]
        assert values(unit, "Service", "StateDirectoryMode") == ["0750"]  # execution logs
        assert _dry_run(directory / name, "billing")["StateDirectory"] == "chrono/log-spool"


@pytest.mark.django_db(transaction=True)
def test_run_unit_runs_the_deploy_step_migrate_then_collectstatic(tmp_path):
    from django.db import connection

    environment = _read_env_for_test_database(tmp_path, connection.settings_dict["NAME"])
    directory = _units_with_env_dir(tmp_path, environment)
    result = subprocess.run([sys.executable, str(RUN_UNIT), str(directory /
                                                                "chrono-migrate.service")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No migrations to apply" in result.stdout
    assert (tmp_path / "static" / "staticfiles.json").exists()  # the manifest the web needs


def _read_env_for_test_database(tmp_path: Path, database: str) -> dict[str, str]:
    """make-env's file for this machine's services and the tests' database."""
    output = tmp_path / "generated.env"
    result = _make_env("systemd", "--output", str(output), "--allowed-hosts", "chrono.test",
                       "--from-credentials", str(get_config().credentials_path),
                       "--database-name", database, "--redis-db",
                       str(load_config().test_redis_db), "--static-root",
                       str(tmp_path / "static"))
    assert result.returncode == 0, result.stderr
    return _read_env(output)


def test_a_value_with_spaces_reads_the_same_in_systemd_and_in_a_shell(tmp_path, services_up):
    """docs/production.md loads the file both ways: EnvironmentFile= (here run-unit, which
    reads it as systemd does) and `set -a; . /etc/chrono/chrono.env` before a command."""
    output = tmp_path / "chrono.env"
    args = "--pool threads --concurrency 64 --include billing.tasks"
    assert _make_env("systemd", "--output", str(output), "--allowed-hosts", "a.test,b.test",
                     "--from-credentials", str(get_config().credentials_path),
                     "--worker-args", args).returncode == 0
    assert f'WORKER_ARGS="{args}"' in output.read_text()
    shell = subprocess.run(["bash", "-c", f'set -a; . {output}; set +a; printf %s "$WORKER_ARGS"'],
                           capture_output=True, text=True, timeout=30)
    assert (shell.returncode, shell.stdout, shell.stderr) == (0, args, "")
    directory = _units_with_env_dir(tmp_path, {})
    (tmp_path / "etc" / "chrono.env").write_text(output.read_text())
    worker = _dry_run(directory / "chrono-worker@.service", "billing")
    assert worker["commands"][0][-6:] == args.split()
