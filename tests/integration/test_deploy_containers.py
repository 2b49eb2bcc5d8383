"""deploy/Dockerfile and deploy/compose.yaml, checked as far as a machine without a Docker
daemon allows: hadolint on the Dockerfile, the compose file against the Compose Specification's
schema (the copy check-jsonschema ships), every Chrono service's command parsed by the real
command's parser, every CHRONO_ variable a real setting, and the environment compose would
give the processes accepted by Chrono's configuration and its production credential rules."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from chronocore.config import ChronoConfig, load_config
from chronocore.credentials import weak_credentials
from localservices.processes import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
CHRONO_IMAGE = "chrono:latest"
SETTINGS = {f"CHRONO_{f.upper()}" for f in ChronoConfig.__dataclass_fields__
            if not f.endswith("_url")}


def _tool(name: str) -> str:
    """A dev dependency's console script, from this virtualenv (pyproject's `dev` extra)."""
    path = Path(sys.prefix) / "bin" / name
    return str(path) if path.exists() else (shutil.which(name) or pytest.fail(
        f"{name} is missing: `make install` installs the dev dependencies"))


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _chrono_services() -> dict[str, dict]:
    return {name: service for name, service in _compose()["services"].items()
            if service.get("image") == CHRONO_IMAGE}


def _parse_chrono_command(argv: list[str]) -> None:
    from django.core.management import CommandError, get_commands, load_command_class

    command, *arguments = argv
    name = command.replace("-", "_")
    commands = get_commands()
    assert name in commands, f"`chrono {command}` is no chrono command"
    parser = load_command_class(commands[name], name).create_parser("chrono", name)
    try:
        parser.parse_args(arguments)
    except (SystemExit, CommandError):
        pytest.fail(f"`chrono {' '.join(argv)}` is refused by its parser")


def test_hadolint_finds_nothing_in_the_dockerfile():
    result = subprocess.run([_tool("hadolint"), "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_installs_every_package_and_runs_chrono():
    text = DOCKERFILE.read_text()
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]
                ["include"]}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", text, flags=re.MULTILINE))
    assert copied == packages
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text()
    assert all(f"!{package}/" in ignored for package in packages)
    assert re.search(r'^ENTRYPOINT \["chrono"\]$', text, flags=re.MULTILINE)
    default = json.loads(re.search(r"^CMD (\[.*\])$", text, flags=re.MULTILINE).group(1))
    _parse_chrono_command(default)


def test_the_compose_file_is_valid_against_the_compose_specification():
    result = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_chrono_service_runs_a_real_command_with_arguments_its_parser_accepts():
    services = _chrono_services()
    assert {"migrate", "collectstatic", "web", "beat-1", "beat-2", "worker", "reaper",
            "indexer"} <= set(services)
    for name, service in services.items():
        assert isinstance(service["command"], list), name
        _parse_chrono_command(service["command"])
    replicas = [s["command"][s["command"].index("--replica-id") + 1]
                for n, s in services.items() if s["command"][0] == "beat"]
    assert len(replicas) == len(set(replicas)) >= 2


def _interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR:?message} and ${VAR:-default}, the only forms the file uses."""
    def substitute(match: re.Match) -> str:
        name, operator, rest = match.group(1), match.group(2), match.group(3)
        if name in variables:
            return variables[name]
        assert operator == ":-", f"${{{name}}} has no value and no default"
        return rest

    return re.sub(r"\$\{(\w+)(:[?-])([^}]*)\}", substitute, value)


def test_the_processes_environment_is_real_settings_with_generated_credentials(tmp_path):
    generated = tmp_path / ".env"
    subprocess.run([sys.executable, str(DEPLOY / "make-env"), "compose", "--output",
                    str(generated)], check=True, timeout=60, capture_output=True)
    variables = dict(line.split("=", 1) for line in generated.read_text().splitlines()
                     if line and not line.startswith("#"))
    for name, service in _chrono_services().items():
        environment = {key: _interpolate(str(value), variables)
                       for key, value in service["environment"].items()}
        unknown = {key for key in environment if key.startswith("CHRONO_")} - SETTINGS
        assert not unknown, f"{name}: {unknown} are no Chrono settings"
        config = load_config(environment)
        assert weak_credentials(config.service_urls()) == [], name
        assert not config.credentials_path.exists()
        assert environment["DJANGO_SETTINGS_MODULE"] == "chronoadmin.settings_production"


def test_every_password_in_the_compose_file_comes_from_the_generated_env_file():
    text = COMPOSE.read_text()
    required = set(re.findall(r"\$\{(\w+):\?", text))
    assert required == {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "RABBITMQ_PASSWORD",
                        "ELASTIC_PASSWORD", "CHRONO_SECRET_KEY", "CHRONO_METRICS_BEARER_TOKEN"}
    secret_keys = re.compile(r"PASSWORD|_PASS$|SECRET|TOKEN")
    for name, service in _compose()["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if secret_keys.search(key):
                assert re.fullmatch(r"\$\{\w+:\?[^}]*\}", str(value)), (name, key)
