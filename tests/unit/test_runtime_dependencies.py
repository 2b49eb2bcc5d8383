"""The runtime dependencies of pyproject.toml are what the runtime code uses: every one is
imported (or named in the settings, as Django apps and middleware are) by a package Chrono
ships, and every third-party module those packages import is declared. A library only the
tests use (croniter) belongs in the ``dev`` extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGES = PYPROJECT["tool"]["importlinter"]["root_packages"]
# Used without an import statement, each for the reason given.
USED_WITHOUT_IMPORT = {
    "tzdata": "zoneinfo's time zones where the system has no tz database (containers)",
    "hiredis": "redis-py's reply parser, which it loads by itself when installed",
}


def _distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _runtime_files() -> list[Path]:
    return [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]


def _imported_modules(*, strings: bool = True) -> set[str]:
    """Top-level names of every module the shipped packages import, and (``strings``) of
    every dotted string in them that may name one (INSTALLED_APPS, MIDDLEWARE, storage
    backends)."""
    names: set[str] = set()
    for path in _runtime_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
            elif strings and isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"[a-z_][a-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", node.value):
                names.add(node.value.split(".")[0])
    return names


def _modules_of() -> dict[str, set[str]]:
    """Distribution (normalised name) -> the top-level modules it installs."""
    modules: dict[str, set[str]] = {}
    for module, distributions in packages_distributions().items():
        for distribution in distributions:
            modules.setdefault(distribution.lower().replace("_", "-"), set()).add(module)
    return modules


def test_every_runtime_dependency_is_used_by_runtime_code():
    declared = [_distribution(r) for r in PYPROJECT["project"]["dependencies"]]
    used = _imported_modules()
    modules_of = _modules_of()
    unused = [name for name in declared if name not in USED_WITHOUT_IMPORT
              and not modules_of.get(name, set()) & used]
    assert unused == [], (
        f"runtime dependencies no shipped package imports: {unused}; move them to the dev "
        "extra (tests only) or drop them")


def test_every_third_party_module_the_runtime_code_imports_is_declared():
    declared = {_distribution(r) for r in PYPROJECT["project"]["dependencies"]}
    modules_of = _modules_of()
    provided = {module for name in declared for module in modules_of.get(name, set())}
    installed = {module for modules in modules_of.values() for module in modules}
    third_party = {name for name in _imported_modules(strings=False)
                   if name in installed and name not in sys.stdlib_module_names
                   and name not in PACKAGES}
    assert sorted(third_party - provided) == []


def test_the_check_would_catch_croniter_at_run_time_again():
    dev = {_distribution(r) for r in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    assert "croniter" in dev
    assert "croniter" not in _imported_modules()
