"""Debian packages the services need, installed with apt-get only when missing."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from chronocore.progress import phase_progress
from localservices.apt_progress import AptProgress
from localservices.base import log, output_tail, run_command
from localservices.errors import ServiceInstallError
from localservices.streamed import STATUS_FD, run_streamed

APT_GET = "apt-get"
APT_TIMEOUT_S = 1200.0
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
APT_LISTS_GLOB = "/var/lib/apt/lists/*_Packages*"
SYSTEMCTL = "systemctl"


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


def _apt_get(*args: str, progress_drawn: bool = True) -> subprocess.CompletedProcess[str]:
    """``apt-get ARGS`` with its progress shown while it runs (a bar on a terminal unless not
    ``progress_drawn``, else a log line per phase and tenth: :mod:`localservices.apt_progress`);
    dpkg's errors, if any, end the output, where :func:`output_tail` finds them."""
    log.info("running apt-get %s", " ".join(args))
    with phase_progress(f"apt-get {args[0]}", plain=lambda line: log.info("%s", line),
                        enabled=progress_drawn) as display:
        progress = AptProgress(display)
        result = run_streamed(
            [APT_GET, "-o", f"APT::Status-Fd={STATUS_FD}", *args],
            env={"DEBIAN_FRONTEND": "noninteractive"}, timeout_s=APT_TIMEOUT_S,
            on_output=progress.output_line, on_status=progress.status_line,
        )
        if result.returncode == 0:  # dpkg's own percent ends below 100
            display.update("done", percent=100.0)
    if progress.errors:
        result.stdout += "".join(f"dpkg: {error}\n" for error in progress.errors)
    return result


def ensure_packages(packages: Sequence[str], *, progress_drawn: bool = True) -> None:
    """Install the Debian ``packages`` that are missing; ``apt-get update`` only if needed.
    apt's progress is drawn on a terminal unless not ``progress_drawn`` (then, as off a
    terminal, its phases are log lines)."""
    missing = _missing_packages(packages)
    if not missing:
        return
    if os.geteuid() != 0:
        raise ServiceInstallError(f"{', '.join(missing)} missing; run `chrono services up` as root")
    install = ("install", "-y", "--no-install-recommends", *missing)
    drawn = {"progress_drawn": progress_drawn}
    with _init_scripts_blocked():
        if not glob.glob(APT_LISTS_GLOB):
            _apt_get("update", **drawn)
        result = _apt_get(*install, **drawn)
        if result.returncode != 0:
            _apt_get("update", **drawn)
            result = _apt_get(*install, **drawn)
    if result.returncode != 0:
        raise ServiceInstallError(
            f"apt-get could not install {', '.join(missing)}:\n{output_tail(result)}"
        )



def disable_distribution_units(units: Sequence[str]) -> None:
    """Keep the distribution's own instances of the servers (``postgresql``, ``redis-server``,
    ``rabbitmq-server``), which their packages enable when installed, from starting at the next
    boot and taking Chrono's ports: their systemd units are disabled. Nothing is done without
    systemctl or root, or for a unit that is not enabled; ``systemctl enable UNIT`` undoes it.
    A unit systemctl cannot disable is logged and left: Chrono's ``up`` still evicts an instance
    holding its ports (:mod:`localservices.lifecycle`)."""
    if shutil.which(SYSTEMCTL) is None or os.geteuid() != 0:
        return
    for unit in units:
        if run_command([SYSTEMCTL, "is-enabled", unit]).stdout.strip() != "enabled":
            continue
        result = run_command([SYSTEMCTL, "disable", "--quiet", unit])
        if result.returncode == 0:
            log.info("disabled the distribution's %s unit, so that it does not take Chrono's "
                     "ports at the next boot (`systemctl enable %s` undoes it)", unit, unit)
        else:
            log.warning("could not disable the distribution's %s unit: %s", unit,
                        output_tail(result))
