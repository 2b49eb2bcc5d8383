"""Every exception a package defines belongs to its family (one base per package, in its
``errors.py``), so a caller can catch what a package raises by one name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from rest_framework.exceptions import APIException

from chronocore.errors import ChronoCoreError
from localservices.errors import ServiceError
from reaper.errors import ReaperError
from scheduler.errors import SchedulerError
from search.errors import SearchError
from workflows.errors import WorkflowError

FAMILIES = {
    "chronocore": ChronoCoreError,
    "localservices": ServiceError,
    "search": SearchError,
    "scheduler": SchedulerError,
    "workflows": WorkflowError,
    "reaper": ReaperError,
}


def exceptions_defined_in(package: str) -> list[type[BaseException]]:
    """The exception classes the package's modules define (migrations and ``__main__``, which
    runs a command when imported, aside). DRF's
    ``APIException`` subclasses are left out: they are the REST API's answers (a status code
    and a body), DRF's family, not errors the package raises to its callers."""
    root = importlib.import_module(package)
    found = []
    for module_info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if ".migrations" in module_info.name or module_info.name.endswith(".__main__"):
            continue
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if (issubclass(value, BaseException) and value.__module__ == module.__name__
                    and not issubclass(value, APIException)):
                found.append(value)
    return found


@pytest.mark.parametrize(("package", "base"), FAMILIES.items(), ids=FAMILIES)
def test_every_exception_of_a_package_is_in_its_family(package, base):
    outside = [f"{cls.__module__}.{cls.__qualname__}" for cls in exceptions_defined_in(package)
               if not issubclass(cls, base)]
    assert outside == []


@pytest.mark.parametrize(("package", "base"), FAMILIES.items(), ids=FAMILIES)
def test_every_exception_says_when_it_is_raised(package, base):
    undocumented = [cls.__qualname__ for cls in (base, *exceptions_defined_in(package))
                    if not (cls.__doc__ or "").strip()]
    assert undocumented == []
