"""The exception family of ``localservices``: every error it raises is a ServiceError."""

from __future__ import annotations


class ServiceError(Exception):
    """Base class of every error ``localservices`` raises."""


class ServiceConfigError(ServiceError, ValueError):
    """Raised when a URL or ``CHRONO_DATA_DIR`` cannot describe a local Chrono instance."""


class ServiceInstallError(ServiceError):
    """Raised when apt-get cannot install a Debian package a service needs."""


class PortBusyError(ServiceError):
    """Raised when a process that is not a server of the expected kind holds a needed port."""


class ProcessFailed(ServiceError, RuntimeError):
    """Raised when a child process (a beat, worker, reaper … started for ``chrono dev``, the
    benchmarks or the end-to-end tests) exits or is not ready in time; carries the tail of its
    log."""


class ServiceStartError(ServiceError):
    """Raised when a service does not start or answer in time; the message names its log file."""


class ServiceStopError(ServiceError):
    """Raised when a running service does not stop; the message names its log file."""

