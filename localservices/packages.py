"""Debian packages the services need, installed with apt-get only when missing."""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from localservices.base import log, output_tail, run_command
from localservices.errors import ServiceInstallError

APT_TIMEOUT_S = 1200.0
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
APT_LISTS_GLOB = "/var/lib/apt/lists/*_Packages*"


def _missing_packages(packages: Sequence[str]) -> list[str]:
    result = run_command(["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\n", *packages])
    installed = {
        line.split()[0] for line in result.stdout.splitlines() if line.split()[1:2] == ["ii"]
    }
    return [package for package in packages if package not in installed]


@contextmanager
def _init_scripts_blocked() -> Iterator[None]:
    """Keep packages' postinst scripts from starting system instances while apt installs them.

    An existing policy-rc.d (Docker images ship one) is left as it is.
    """
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text(
        "#!/bin/sh\n# Written by localservices during apt-get install\nexit 101\n"
    )
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    log.info("running apt-get %s", " ".join(args))
    return run_command(
        ["apt-get", *args], env={"DEBIAN_FRONTEND": "noninteractive"}, timeout_s=APT_TIMEOUT_S
    )


def ensure_packages(packages: Sequence[str]) -> None:
    """Install the Debian ``packages`` that are missing; ``apt-get update`` only if needed."""
    missing = _missing_packages(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        raise ServiceInstallError(f"{', '.join(missing)} missing; run `chrono services up` as root")
    install = ("install", "-y", "--no-install-recommends", *missing)
    with _init_scripts_blocked():
        if not glob.glob(APT_LISTS_GLOB):
            _apt_get("update")
        result = _apt_get(*install)
        if result.returncode != 0:
            _apt_get("update")
            result = _apt_get(*install)
    if result.returncode != 0:
        raise ServiceInstallError(
            f"apt-get could not install {', '.join(missing)}:\n{output_tail(result)}"
        )

