"""The live dashboard (an admin page whose script polls a JSON endpoint). The health endpoints
are :mod:`chronoadmin.health`."""

from __future__ import annotations

from django.contrib import admin
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from chronoadmin.dashboard_data import dashboard_data
from chronocore.config import get_config
from chronocore.models import Tenant

# The page polls this often while it is visible; the server computes the figures at most once
# per DASHBOARD_CACHE_S for each tenant filter, however many pages poll.
DASHBOARD_REFRESH_MS = 2_000
DASHBOARD_CACHE_S = 1
TENANT_CHOICES = 500


def dashboard_view(request: HttpRequest) -> HttpResponse:
    """The dashboard's page; its figures come from :func:`dashboard_data_view`, polled by the
    page's script (no reload)."""
    context = {
        **admin.site.each_context(request),
        "title": "Live dashboard",
        "refresh_ms": DASHBOARD_REFRESH_MS,
        "tenants": Tenant.objects.order_by("slug").values_list("slug", flat=True)[:TENANT_CHOICES],
    }
    return render(request, "chronoadmin/dashboard.html", context)


def dashboard_data_view(request: HttpRequest) -> JsonResponse:
    """The dashboard's figures as JSON, for the whole platform or ``?tenant=<slug>``.

    Throttled by the server: computed at most once per ``DASHBOARD_CACHE_S`` per tenant filter
    and process, however many browsers poll it."""
    slug = request.GET.get("tenant", "").strip()
    tenant_id = None
    if slug:
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            return JsonResponse({"detail": f"No tenant with the slug {slug!r}."}, status=404)
        tenant_id = str(tenant.tenant_id)
    key = f"chrono-dashboard:{tenant_id or '*'}"
    data = cache.get(key)
    if data is None:
        data = dashboard_data(
            tenant_id=tenant_id,
            heartbeat_interval_s=get_config().worker_heartbeat_interval_ms / 1000,
        )
        data["tenant"] = slug or None
        cache.set(key, data, DASHBOARD_CACHE_S)
    return JsonResponse(data)
