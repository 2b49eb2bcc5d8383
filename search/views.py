"""The admin's audit page (``/admin/audit/``, staff only): a search box, filters, the matching
events newest first, and how many there are of each action and outcome.

Platform staff see every tenant; the ``tenant`` filter (a slug or an id) narrows to one. Tenant
staff (:mod:`chronocore.staff`) see one of their own tenants (the first unless ``tenant`` names
another of theirs; any other tenant is unknown to them). The page reads the engine through the
same query code as ``GET /api/v1/audit/`` (:mod:`search.queries`).
"""

from __future__ import annotations

import uuid

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from chronocore.config import get_config
from chronocore.staff import StaffScope, scope_of
from search.api import SearchEngineUnavailable, run_search
from search.audit import ACTIONS
from search.index_template import AuditStream
from search.queries import OUTCOMES, PARAMETERS, InvalidAuditQuery, parse_audit_query

ADMIN_PAGE_SIZE = 50
ADMIN_PARAMETERS = (*PARAMETERS, "tenant")


def audit_admin_view(request: HttpRequest) -> HttpResponse:
    """The page; mounted behind ``admin.site.admin_view`` (staff only) in chronoadmin.urls."""
    scope = scope_of(request.user)
    if not scope.sees_anything:
        raise PermissionDenied("Your user is not a member of any tenant.")
    params = request.GET.copy()
    errors: dict[str, list[str]] = {}
    tenant_id, tenant_error = _tenant_id(params.pop("tenant", [""])[-1].strip(), scope)
    if tenant_error:
        errors["tenant"] = [tenant_error]
    page = None
    engine_error = ""
    config = get_config()  # a Django view: the process edge, nothing to hand it one
    try:
        query = parse_audit_query(
            params, tenant_id=tenant_id, default_page_size=ADMIN_PAGE_SIZE,
            max_page_size=config.api_max_page_size, allowed=ADMIN_PARAMETERS,
        )
    except InvalidAuditQuery as exc:
        errors.update(exc.errors)
    if not errors:
        try:
            page = run_search(query, config=config, counts=True)
        except SearchEngineUnavailable as exc:
            engine_error = str(exc.detail)
    next_url = None
    if page is not None and page.next_cursor:
        next_params = request.GET.copy()
        next_params["cursor"] = page.next_cursor
        next_url = f"?{next_params.urlencode()}"
    context = {
        **admin.site.each_context(request),
        "title": "Audit log",
        "stream": AuditStream.from_config(config).name,
        "values": request.GET,
        "actions": list(ACTIONS),
        "outcomes": OUTCOMES,
        "errors": errors,
        "engine_error": engine_error,
        "page": page,
        "rows": [_row(doc) for doc in page.documents] if page else [],
        "action_counts": sorted(page.action_counts.items()) if page else [],
        "outcome_counts": sorted(page.outcome_counts.items()) if page else [],
        "next_url": next_url,
    }
    return render(request, "search/audit.html", context)


def _tenant_id(raw: str, scope: StaffScope) -> tuple[str | None, str]:
    """The tenant id the page searches (None: every tenant, for platform staff only) and the
    error to show when ``raw`` names no tenant the user sees."""
    tenants = scope.tenants()
    if not raw:
        first = None if scope.platform else tenants.first()
        return (None if first is None else str(first.tenant_id)), ""
    try:
        tenant_id = uuid.UUID(raw)
    except ValueError:
        tenant = tenants.filter(slug=raw).first()
    else:
        if scope.platform:
            return str(tenant_id), ""
        tenant = tenants.filter(tenant_id=tenant_id).first()
    if tenant is None:  # the page then searches nothing
        return None, f"No tenant with the slug or id '{raw[:64]}'."
    return str(tenant.tenant_id), ""


def _row(document: dict) -> dict:
    event, chrono = document.get("event", {}), document.get("chrono", {})
    return {
        "timestamp": document.get("@timestamp", ""),
        "action": event.get("action", ""),
        "outcome": event.get("outcome", ""),
        "tenant": document.get("labels", {}).get("tenant") or chrono.get("tenant_id", ""),
        "job_id": chrono.get("job_id", ""),
        "execution_id": chrono.get("execution_id", ""),
        "actor": chrono.get("actor", ""),
        "message": document.get("message", ""),
    }
