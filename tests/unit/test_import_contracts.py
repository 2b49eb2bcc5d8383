"""The import contracts (``[tool.importlinter]`` in pyproject.toml) hold for Chrono's tree, and an
import that runs back up the layers, or a pure module that starts doing I/O, breaks them by name.

``lint-imports`` runs as ``make lint`` does (so ``make test`` and CI fail on a violation); the
deliberate violations are made in a scratch copy of the packages, never in the tree itself.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
IMPORTLINTER = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(cwd: Path, *contract_ids: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` with the contracts of ``cwd/pyproject.toml``, over the packages in ``cwd``
    (import-linter puts its working directory first on ``sys.path``)."""
    only = [arg for contract_id in contract_ids for arg in ("--contract", contract_id)]
    return subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache", "--no-logo", *only],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )


def _source_only(directory: str, names: list[str]) -> set[str]:
    """What the import graph does not read: caches, build output and every file but Python."""
    root = Path(directory)
    return {
        name for name in names
        if name in ("__pycache__", "target", "node_modules")
        or ((root / name).is_file() and not name.endswith(".py"))
    }


@pytest.fixture(scope="module")
def scratch_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of every root package's Python files and of pyproject.toml."""
    root = tmp_path_factory.mktemp("tree")
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    for package in IMPORTLINTER["root_packages"]:
        shutil.copytree(REPO_ROOT / package, root / package, ignore=_source_only)
    return root


@pytest.fixture
def scratch_module(scratch_tree: Path) -> Iterator:
    """``write(path, source)`` adds or appends to a module of the scratch tree for one test;
    every file is put back as it was afterwards."""
    saved: dict[Path, str | None] = {}

    def write(relative_path: str, source: str) -> None:
        path = scratch_tree / relative_path
        saved.setdefault(path, path.read_text() if path.exists() else None)
        path.write_text((saved[path] or "") + source)

    try:
        yield write
    finally:
        for path, text in saved.items():
            if text is None:
                path.unlink()
            else:
                path.write_text(text)


def test_the_tree_keeps_every_contract():
    result = lint_imports(REPO_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    kept = len(IMPORTLINTER["contracts"])
    assert f"Contracts: {kept} kept, 0 broken." in result.stdout


def test_the_scratch_copy_keeps_every_contract_before_it_is_broken(scratch_tree: Path):
    result = lint_imports(scratch_tree)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "source", "contract_id", "named"),
    [
        pytest.param(
            "scheduler/_upward.py",
            '"""Scratch."""\n\n\ndef celery_app():\n    from chronoadmin.celery import app\n\n'
            "    return app\n",
            "layers",
            ["scheduler is not allowed to import chronoadmin",
             "scheduler._upward -> chronoadmin.celery"],
            id="function-local-import-from-scheduler-up-to-chronoadmin",
        ),
        pytest.param(
            "chronocore/_upward.py",
            '"""Scratch."""\n\nfrom scheduler.timers import timer_store  # noqa: F401\n',
            "layers",
            ["chronocore is not allowed to import scheduler",
             "chronocore._upward -> scheduler.timers"],
            id="ground-floor-importing-scheduler",
        ),
        pytest.param(
            "search/_upward.py",
            '"""Scratch."""\n\nfrom scheduler import models  # noqa: F401\n',
            "layers",
            ["search is not allowed to import scheduler", "search._upward -> scheduler.models"],
            id="search-importing-scheduler-above-it",
        ),
        pytest.param(
            "reaper/_sideways.py",
            '"""Scratch."""\n\nfrom workflows import engine  # noqa: F401\n',
            "layers",
            ["reaper is not allowed to import workflows", "reaper._sideways -> workflows.engine"],
            id="reaper-importing-its-independent-sibling",
        ),
        pytest.param(
            "search/_services.py",
            '"""Scratch."""\n\nimport localservices  # noqa: F401\n',
            "localservices-from-the-top",
            ["search._services -> localservices"],
            id="search-starting-local-services",
        ),
        pytest.param(
            "scheduler/lifecycle.py",
            "\n\ndef _start():\n    from scheduler.executions import start_execution\n\n"
            "    return start_execution\n",
            "execution-lifecycle",
            ["scheduler.lifecycle is not allowed to import scheduler.executions",
             "scheduler.lifecycle -> scheduler.executions"],
            id="lifecycle-rules-importing-a-stage",
        ),
        pytest.param(
            "scheduler/occurrences.py",
            '\n\nfrom scheduler.cancellation import request_cancel_running  # noqa: E402, F401\n',
            "execution-lifecycle",
            ["scheduler.occurrences is not allowed to import scheduler.cancellation",
             "scheduler.occurrences -> scheduler.cancellation"],
            id="one-lifecycle-stage-borrowing-from-another",
        ),
        pytest.param(
            "scheduler/cron.py",
            "\n\ndef _client():\n    import redis\n\n    return redis.Redis()\n",
            "pure-core",
            ["scheduler.cron is not allowed to import redis", "scheduler.cron -> redis"],
            id="pure-cron-doing-redis-io",
        ),
        pytest.param(
            "scheduler/specs.py",
            "\n\ndef _job_model():\n    from scheduler.models import Job\n\n    return Job\n",
            "pure-core",
            ["scheduler.specs is not allowed to import django",
             "scheduler.specs -> scheduler.models"],
            id="the-job-spec-validator-reaching-for-the-orm",
        ),
    ],
)
def test_an_import_against_the_contracts_fails_them_naming_both_modules(
    scratch_tree: Path, scratch_module, module: str, source: str, contract_id: str,
    named: list[str],
):
    scratch_module(module, source)
    result = lint_imports(scratch_tree, contract_id)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 0 kept, 1 broken." in result.stdout
    for text in named:
        assert text in result.stdout, result.stdout
