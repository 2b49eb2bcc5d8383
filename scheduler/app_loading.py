"""Finding an existing project's Celery app and task modules by name, as ``celery -A`` does, for
``chrono sync-jobs`` and ``chrono import-beat``. Every failure says what to pass instead."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from celery import Celery

from scheduler.errors import AppNotFound


def load_celery_app(spec: str) -> Celery:
    """The Celery app ``MODULE:APP`` names; ``MODULE`` alone looks for ``app``, then
    ``celery``, in it (Celery's own ``-A`` convention)."""
    module_name, _, attribute = spec.partition(":")
    module = import_module(module_name)
    names = [attribute] if attribute else ["app", "celery"]
    for name in names:
        candidate = getattr(module, name, None)
        if isinstance(candidate, Celery):
            return candidate
        if candidate is not None and attribute:
            raise AppNotFound(f"{spec} is a {type(candidate).__name__}, not a Celery app")
    raise AppNotFound(
        f"{module_name} has no Celery app named {' or '.join(names)}; pass MODULE:APP "
        "naming it (e.g. proj.celery:app)"
    )


def import_task_modules(spec: str) -> None:
    """Import what ``spec`` names: a module, or with ``MODULE:APP`` every task module that app's
    worker imports (its ``imports``, ``include`` and autodiscovered modules)."""
    if ":" in spec:
        load_celery_app(spec).loader.import_default_modules()
    else:
        import_module(spec)


def import_module(name: str) -> object:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise AppNotFound(f"cannot import {name}: {exc}") from exc


def routed_queue(app: Celery, task_name: str) -> str | None:
    """The queue the app's ``task_routes`` send ``task_name`` to; None when no route names it
    (the app's default queue does not count: it is usually a classic queue Chrono must not
    take over)."""
    route = app.amqp.router.lookup_route(task_name, (), {}, {})
    if isinstance(route, str):
        return route
    queue = route.get("queue") if isinstance(route, Mapping) else None
    return queue if isinstance(queue, str) or queue is None else queue.name
