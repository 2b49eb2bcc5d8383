"""The live dashboard (an admin page whose script polls a JSON endpoint). The health endpoints
are :mod:`chronoadmin.health`.

Platform staff see every tenant (the default) or one (``?tenant=<slug>``); tenant staff
(:mod:`chronocore.staff`) see their own tenants only: without ``tenant`` their first, and
another tenant's slug answers 404 as an unknown one does. The platform-wide panels (workers,
timers, queues) are in the all-tenants view only.

Both views are served from the snapshots a reaper computes every few seconds
(:mod:`chronoadmin.dashboard_snapshot`: the platform's, and those of the tenants viewed in the
last minute, each under its tenant's id), or computed here when one is missing (a tenant's
first view) or too old, saying why. Figures computed here are kept in Redis for
:data:`DASHBOARD_CACHE_MS` under their tenant's id (:func:`live_key`), shared by every web
process, so however many pages poll one tenant's view it is computed about once a
``DASHBOARD_CACHE_MS``. Every answer says where its figures come from (``source``) and when they
were computed (``as_of``, ``age_s``)."""

from __future__ import annotations

import logging
from datetime import datetime

import orjson
import redis
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from chronoadmin.dashboard_data import dashboard_data
from chronoadmin.dashboard_snapshot import read_snapshot

# get_config() here: Django views: the process edge, nothing owns them to hand them the
# configuration.
from chronocore.config import get_config
from chronocore.models import Tenant
from chronocore.redis_client import redis_client
from chronocore.staff import scope_of
from scheduler.clock import datetime_to_ms, ms_to_datetime, now_ms

# The page polls this often while it is visible; the web processes compute the figures of a
# view about once per DASHBOARD_CACHE_MS, however many pages poll (a page polling every 2 s
# never gets the figures it got last time).
DASHBOARD_REFRESH_MS = 2_000
DASHBOARD_CACHE_MS = 1_000
# One hash tag with the reapers' snapshot (chronoadmin.dashboard_snapshot): the dashboard's
# keys live on one node of a Redis Cluster.
LIVE_KEY_PREFIX = "{chrono:dashboard}:live:"

log = logging.getLogger("chrono.web.dashboard")
TENANT_CHOICES = 500
NO_TENANT = ("Your user is not a member of any tenant: platform staff add members "
             "(`chrono tenant-staff add`, or Tenant memberships in the admin).")


class UnknownTenant(Exception):
    """Raised when the tenant filter names no tenant the user sees."""


def tenant_in_view(request: HttpRequest, slug: str) -> Tenant | None:
    """The tenant the dashboard shows for ``slug`` (None: all tenants, for platform staff).
    Raises :class:`UnknownTenant`, or ``PermissionDenied`` for a staff user who sees none."""
    scope = scope_of(request.user)
    if not scope.sees_anything:
        raise PermissionDenied(NO_TENANT)
    if slug:
        tenant = scope.tenants().filter(slug=slug).first()
        if tenant is None:
            raise UnknownTenant(f"No tenant with the slug {slug[:64]!r}.")
        return tenant
    return None if scope.platform else scope.tenants().first()


def dashboard_view(request: HttpRequest) -> HttpResponse:
    """The dashboard's page; its figures come from :func:`dashboard_data_view`, polled by the
    page's script (no reload)."""
    scope = scope_of(request.user)
    if not scope.sees_anything:
        raise PermissionDenied(NO_TENANT)
    slugs = list(scope.tenants().values_list("slug", flat=True)[:TENANT_CHOICES])
    context = {
        **admin.site.each_context(request),
        "title": "Live dashboard",
        "refresh_ms": DASHBOARD_REFRESH_MS,
        "tenants": slugs,
        # Tenant staff start on their (first) tenant and have no "all tenants" view.
        "tenant_initial": "" if scope.platform else slugs[0],
        "tenant_fixed": not scope.platform and len(slugs) == 1,
        "platform": scope.platform,
    }
    return render(request, "chronoadmin/dashboard.html", context)


def dashboard_data_view(request: HttpRequest) -> JsonResponse:
    """The dashboard's figures as JSON, for the whole platform or ``?tenant=<slug>``, with
    ``source`` ("snapshot" or "live"), ``as_of`` and ``age_s``.

    Both come from the reapers' snapshots (:func:`platform_data`, :func:`tenant_data`), or
    are computed here (:func:`live_data`: about once per ``DASHBOARD_CACHE_MS`` per view,
    however many browsers poll it). A tenant's staff never get the platform's or another
    tenant's: :func:`tenant_in_view` always gives them one of their tenants, whose id keys
    what is read."""
    slug = request.GET.get("tenant", "").strip()
    try:
        tenant = tenant_in_view(request, slug)
    except UnknownTenant as exc:
        return JsonResponse({"detail": str(exc)}, status=404)
    except PermissionDenied as exc:
        return JsonResponse({"detail": str(exc)}, status=403)
    if tenant is None:
        return JsonResponse(platform_data())
    return JsonResponse(tenant_data(str(tenant.tenant_id), tenant.slug))


def live_key(tenant_id: str | None) -> str:
    """The Redis key of the figures computed here for ``tenant_id`` (None: the platform's):
    its id, never a slug from the request, so a tenant's figures are only ever found under
    the id of the tenant :func:`tenant_in_view` gave."""
    return LIVE_KEY_PREFIX + (tenant_id or "platform")


def live_data(tenant_id: str | None, slug: str = "") -> dict:
    """The figures computed here (``tenant_id`` None: the whole platform), marked ``source:
    "live"``: those another request computed in the last ``DASHBOARD_CACHE_MS`` (kept in
    Redis, for every web process), else computed now. Redis failing costs the sharing, never
    the answer."""
    client = redis_client()
    key = live_key(tenant_id)
    try:
        body = client.get(key)
    except redis.RedisError as exc:
        log.warning("dashboard figures not read from Redis, computed: %r", exc)
        body = None
    if body is not None:
        data = orjson.loads(body)
    else:
        data = dashboard_data(
            tenant_id=tenant_id,
            heartbeat_interval_s=get_config().worker_heartbeat_interval_ms / 1000,
        )
        data["tenant"] = slug or None
        try:
            client.set(key, orjson.dumps(data), px=DASHBOARD_CACHE_MS)
        except redis.RedisError as exc:  # the next request computes them again
            log.warning("dashboard figures not kept in Redis: %r", exc)
    return _dated(data, source="live", as_of=datetime.fromisoformat(data["generated_at"]))


def platform_data() -> dict:
    """The all-tenants figures: the reapers' snapshot (:mod:`chronoadmin.dashboard_snapshot`)
    while it is younger than ``dashboard_snapshot_max_age_ms``, else computed here, the answer
    saying why (``live_reason``): the dashboard never shows old figures as if they were new."""
    return _snapshot_or_live(None, "")


def tenant_data(tenant_id: str, slug: str) -> dict:
    """One tenant's figures: the snapshot the reapers compute for the tenants viewed lately
    (this request notes the tenant as viewed), else computed here, saying why (the first view
    of a tenant, or no reaper running)."""
    return _snapshot_or_live(tenant_id, slug)


def _snapshot_or_live(tenant_id: str | None, slug: str) -> dict:
    config = get_config()
    reading = read_snapshot(redis_client(), now_ms=now_ms(),
                            max_age_ms=config.dashboard_snapshot_max_age_ms,
                            interval_ms=config.dashboard_snapshot_interval_ms,
                            tenant_id=tenant_id)
    if reading.data is not None:
        return _dated({**reading.data, "tenant": slug or None}, source="snapshot",
                      as_of=ms_to_datetime(reading.as_of_ms))
    return {**live_data(tenant_id, slug), "live_reason": reading.reason}


def _dated(data: dict, *, source: str, as_of: datetime) -> dict:
    """``data`` with where its figures come from, when they were computed (``as_of``, ISO
    8601) and how old they are now (``age_s``)."""
    return {**data, "source": source, "as_of": as_of.isoformat(),
            "age_s": round(max(0, now_ms() - datetime_to_ms(as_of)) / 1000, 1)}
