"""Per-tenant task and queue grants: which tasks, on which queues, a tenant may run.

A grant is a pair of patterns, ``(task_pattern, queue_pattern)``. A pattern is an exact name
(``billing.tasks.charge``) or a glob in :mod:`fnmatch`'s syntax, matched **case-sensitively**
(Celery task names and RabbitMQ queue names are): ``*`` is any run of characters, dots
included (``billing.*`` covers ``billing.tasks.charge``; ``*`` alone covers everything), ``?``
one character, ``[abc]`` one of the characters listed. An empty pattern, or one holding
whitespace or control characters, is refused when a grant is made and matches nothing. A task
on a queue is granted when one grant's task pattern matches the task and its queue pattern the
queue. Nothing is granted by default, Chrono's built-in ``chrono.*`` and Celery's ``celery.*``
tasks included.

Lookups are cached per process and per tenant for ``grant_cache_ttl_ms`` (5 s): the check runs
on every schedule call and on every message a worker receives, so it must cost a dictionary
look-up, not a query. Changing a grant clears this process's entry at once (a signal); other
processes (workers, other web processes) see the change within the TTL. A version counter in
Redis would make that immediate but add a round trip to every message, or be cached itself,
which is a TTL again; a grant revoked is refused everywhere five seconds later, and a message
already in a queue is refused by its worker (defence in depth).

A worker does not reload an entry on a delivery: its refresher thread (:func:`start_refresher`,
started with the worker and in each prefork child) reads every tenant's grants once at its
start, then every half TTL those of the tenants it looked up in the last ten minutes
(:data:`KEEP_WARM_S`; a thousand tenants a query), so an entry in use is renewed before it
expires and a burst that follows an idle spell finds its tenants' grants in the cache (a stale
entry reloaded by each of a thread pool's 64 threads at once held a burst's first starts back by
up to 260 ms). The TTL still bounds
how old an answer may be: an entry the refresher failed to renew expires and is read again on
the delivery, as without a refresher; and a load of one tenant's entry runs once however many
threads want it at the same moment.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

# get_config() here: the grant cache is the process's, shared by every way in (the API, the Python
# API, the worker's check): it has no owner to be handed a configuration, so it reads the
# process's.
from chronocore.config import get_config
from chronocore.errors import InvalidGrant
from chronocore.models import TaskGrant, Tenant

EVERYTHING = "*"
MAX_PATTERN_LENGTH = 200
_MEMO_LIMIT = 1_024  # distinct (task, queue) answers kept per tenant entry
log = logging.getLogger("chrono.grants")


def pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` cannot be a grant's pattern, or None when it can."""
    if not isinstance(pattern, str) or not pattern:
        return "a pattern is a non-empty name or glob, e.g. 'billing.tasks.charge' or 'billing.*'"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"a pattern has at most {MAX_PATTERN_LENGTH} characters"
    if any(c.isspace() or not c.isprintable() for c in pattern):
        return "a pattern holds no whitespace or control characters"
    return None


def compile_pattern(pattern: str) -> re.Pattern[str] | None:
    """The regular expression of a grant pattern; None for a pattern that matches nothing."""
    if pattern_problem(pattern):
        return None
    return re.compile(fnmatch.translate(pattern))


def pattern_matches(pattern: str, name: str) -> bool:
    """Whether ``name`` is covered by ``pattern`` (exact or glob, case-sensitive)."""
    compiled = compile_pattern(pattern)
    return compiled is not None and bool(name) and compiled.match(name) is not None


Rule = tuple[re.Pattern[str], re.Pattern[str]]


def compile_rules(pairs: Iterable[tuple[str, str]]) -> tuple[Rule, ...]:
    """Compiled ``(task, queue)`` pattern pairs; pairs with an unusable pattern are dropped."""
    rules = []
    for task_pattern, queue_pattern in pairs:
        task_re, queue_re = compile_pattern(task_pattern), compile_pattern(queue_pattern)
        if task_re is not None and queue_re is not None:
            rules.append((task_re, queue_re))
    return tuple(rules)


def rules_grant(rules: tuple[Rule, ...], task_name: str, queue: str) -> bool:
    """Whether one of ``rules`` covers ``task_name`` on ``queue``."""
    if not task_name or not queue:
        return False
    return any(t.match(task_name) and q.match(queue) for t, q in rules)


# --------------------------------------------------------------------------- cached look-up


@dataclass
class _Entry:
    expires_at_s: float
    slug: str
    pairs: tuple[tuple[str, str], ...]  # the patterns the rules were compiled from
    rules: tuple[Rule, ...]
    answers: dict[tuple[str, str], bool] = field(default_factory=dict)
    used_at_s: float = 0.0  # last looked up (the refresher renews entries in use)


# The refresher renews the entries looked up within this long: a worker serving a few of
# 10,000 tenants reads their grants, not everyone's, every round.
KEEP_WARM_S = 600.0
_CHUNK = 1_000  # tenant ids per query of a refresh


_cache: dict[str, _Entry] = {}
_lock = threading.Lock()
# One load of a tenant's entry at a time: a lock per stripe of tenants (a fixed number, not one
# per tenant ever seen), so threads that found the same entry stale wait for one load.
_LOAD_STRIPES = 64
_loading = tuple(threading.Lock() for _ in range(_LOAD_STRIPES))
# Bumped by every forget(): a refresh whose reads began before a forget() does not put back
# what it read (the grant changed meanwhile), so a change made in this process is seen at once.
_generation = [0]


def _ttl_s() -> float:
    return get_config().grant_cache_ttl_ms / 1000


def _fresh(key: str, now: float) -> _Entry | None:
    entry = _cache.get(key)
    return entry if entry is not None and entry.expires_at_s > now else None


def _entry(tenant_id: uuid.UUID | str) -> _Entry:
    key = str(tenant_id)
    now = time.monotonic()
    entry = _fresh(key, now)
    if entry is not None:
        entry.used_at_s = now
        return entry
    with _loading[hash(key) % _LOAD_STRIPES]:
        entry = _fresh(key, time.monotonic())
        if entry is not None:
            return entry
        with _lock:
            generation = _generation[0]
        now = time.monotonic()
        pairs, slugs = _read([key])
        tenant_pairs = pairs.get(key, ())
        entry = _Entry(now + _ttl_s(), slugs.get(key, key), tenant_pairs,
                       compile_rules(tenant_pairs), used_at_s=now)
        with _lock:
            if _generation[0] == generation:
                _cache[key] = entry
        return entry


def refresh_all(*, every_tenant: bool = False) -> int:
    """Read the grants of the tenants whose entries were looked up in the last
    :data:`KEEP_WARM_S` (``every_tenant``: of every tenant, as a worker does at its start) and
    renew this process's entries with them, the TTL counted from before the reads; how many
    tenants. Entries whose patterns did not change keep their compiled rules and memoised
    answers; the others age out."""
    now = time.monotonic()
    with _lock:
        generation = _generation[0]
        keys = None if every_tenant else [key for key, entry in _cache.items()
                                          if entry.used_at_s > now - KEEP_WARM_S]
    if keys == []:
        return 0
    pairs, slugs = _read(keys)
    expires_at_s = now + _ttl_s()
    renewed = {}
    for key, slug in slugs.items():
        tenant_pairs = pairs.get(key, ())
        old = _cache.get(key)
        if old is not None and old.pairs == tenant_pairs:
            renewed[key] = _Entry(expires_at_s, slug, tenant_pairs, old.rules, old.answers,
                                  old.used_at_s)
        else:
            renewed[key] = _Entry(expires_at_s, slug, tenant_pairs, compile_rules(tenant_pairs),
                                  used_at_s=old.used_at_s if old is not None else now)
    with _lock:
        if _generation[0] != generation:
            return 0  # a grant changed while reading: the next round reads it
        _cache.update(renewed)
        for key in set(_cache if keys is None else keys) - set(slugs):
            _cache.pop(key, None)  # the tenant is gone
    return len(slugs)


def _read(keys: list[str] | None) -> tuple[dict[str, tuple[tuple[str, str], ...]],
                                            dict[str, str]]:
    """The grant patterns (in grant order) and slugs of the tenants ``keys`` (None: every
    tenant's), :data:`_CHUNK` tenants a pair of queries."""
    pairs: dict[str, list[tuple[str, str]]] = {}
    slugs: dict[str, str] = {}
    for chunk in [None] if keys is None else [keys[i:i + _CHUNK]
                                              for i in range(0, len(keys), _CHUNK)]:
        grant_rows, tenant_rows = TaskGrant.objects.order_by("pk"), Tenant.objects.all()
        if chunk is not None:
            grant_rows = grant_rows.filter(tenant_id__in=chunk)
            tenant_rows = tenant_rows.filter(tenant_id__in=chunk)
        for tenant_id, task_pattern, queue_pattern in grant_rows.values_list(
                "tenant_id", "task_pattern", "queue_pattern"):
            pairs.setdefault(str(tenant_id), []).append((task_pattern, queue_pattern))
        slugs.update((str(tenant_id), slug)
                     for tenant_id, slug in tenant_rows.values_list("tenant_id", "slug"))
    return {key: tuple(found) for key, found in pairs.items()}, slugs


class _Refresher(threading.Thread):
    def __init__(self, interval_s: float) -> None:
        super().__init__(name="chrono-grants-refresher", daemon=True)
        self.interval_s = interval_s
        self.stopping = threading.Event()

    def run(self) -> None:
        from django.db import connection

        while True:
            try:
                refresh_all()
            except Exception as exc:  # noqa: BLE001 - the entries expire and load on use
                log.warning("could not refresh the task grants (read on use meanwhile): %r", exc)
                connection.close()
            if self.stopping.wait(self.interval_s):
                connection.close()
                return


_refresher: list[_Refresher] = []


def start_refresher(interval_s: float | None = None) -> bool:
    """Start this process's grant refresher (every half TTL unless ``interval_s``), after a first
    refresh done here; False when one already runs or the cache is off (a TTL of 0)."""
    ttl_s = _ttl_s()
    if ttl_s <= 0:
        return False
    with _lock:
        if _refresher and _refresher[0].is_alive():
            return False
        refresher = _Refresher(interval_s if interval_s is not None else ttl_s / 2)
        _refresher[:] = [refresher]
    try:
        refresh_all(every_tenant=True)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not read the task grants at start (read on use meanwhile): %r", exc)
    refresher.start()
    return True


def stop_refresher() -> None:
    """Stop this process's grant refresher (tests)."""
    with _lock:
        refresher = _refresher[:]
        _refresher.clear()
    for thread in refresher:
        thread.stopping.set()
        thread.join(5)


def is_granted(tenant_id: uuid.UUID | str, task_name: str, queue: str) -> bool:
    """Whether the tenant may run ``task_name`` on ``queue`` (cached; see the module's doc)."""
    entry = _entry(tenant_id)
    answer = entry.answers.get((task_name, queue))
    if answer is None:
        answer = rules_grant(entry.rules, task_name, queue)
        if len(entry.answers) < _MEMO_LIMIT:
            entry.answers[(task_name, queue)] = answer
    return answer


def refusal(tenant_id: uuid.UUID | str, task_name: str, queue: str) -> str | None:
    """None when granted; otherwise the message that says what is missing and how to get it."""
    if is_granted(tenant_id, task_name, queue):
        return None
    slug = _entry(tenant_id).slug
    return (f"tenant {slug!r} is not granted task {task_name!r} on queue {queue!r}; ask platform "
            f"staff to grant it (admin: Task grants; API: POST /api/v1/task-grants/; CLI: "
            f"chrono grants add --tenant {slug} --task {task_name} --queue {queue})")


def forget(tenant_id: uuid.UUID | str | None = None) -> None:
    """Drop this process's cached grants of one tenant (all tenants: None)."""
    with _lock:
        _generation[0] += 1
        if tenant_id is None:
            _cache.clear()
        else:
            _cache.pop(str(tenant_id), None)


# --------------------------------------------------------------------------- changes


def grant(tenant: Tenant, task_pattern: str, queue_pattern: str = EVERYTHING, *,
          by: str = "") -> tuple[TaskGrant, bool]:
    """Grant ``tenant`` the tasks and queues the patterns match; ``(grant, created)``, the
    grant already there when it was (nothing changes). Raises :class:`InvalidGrant`."""
    for name, pattern in (("task", task_pattern), ("queue", queue_pattern)):
        if problem := pattern_problem(pattern):
            raise InvalidGrant(f"{name} pattern {pattern!r}: {problem}", field=name)
    task_grant, created = TaskGrant.objects.get_or_create(
        tenant=tenant, task_pattern=task_pattern, queue_pattern=queue_pattern,
        defaults={"created_by": by})
    return task_grant, created


def ensure_granted(tenant: Tenant, task_name: str, queue: str, *, by: str = "") -> bool:
    """Grant ``tenant`` exactly ``task_name`` on ``queue`` unless a grant already covers it;
    True when a grant was made (``chrono sync-jobs`` and ``chrono import-beat``)."""
    if is_granted(tenant.tenant_id, task_name, queue):
        return False
    _, created = grant(tenant, task_name, queue, by=by)
    return created


def revoke(tenant: Tenant, task_pattern: str, queue_pattern: str = EVERYTHING) -> int:
    """Remove the grant of exactly these patterns; how many were removed (0 or 1)."""
    removed, _ = TaskGrant.objects.filter(tenant=tenant, task_pattern=task_pattern,
                                          queue_pattern=queue_pattern).delete()
    return removed


def forget_grant_of(sender: object, instance: TaskGrant, **_: object) -> None:
    """post_save / post_delete receiver: this process reads the tenant's grants again."""
    forget(instance.tenant_id)
