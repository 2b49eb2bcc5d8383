"""Admin pages of workflows: definitions with their versions and their last runs × steps as a
grid (:mod:`workflows.grid`), and runs with every step's state, duration and waiting reason,
drawn as a graph that updates while the run runs.

Runs change only through :mod:`workflows.engine` (cancel, retry from failure buttons); nothing
here edits a run's row or state. Both pages are scoped by tenant
(:class:`chronocore.staff.TenantScopedAdmin`): tenant staff see their tenant's definitions and
runs (another tenant's id answers 404, the graph's JSON and the buttons too) and cancel or retry
with the operator role.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseRedirect,
    JsonResponse,
)
from django.urls import path, reverse
from django.views.decorators.http import require_POST

from chronocore.staff import TenantScopedAdmin
from workflows import engine
from workflows.grid import DEFAULT_RUNS, MAX_RUNS, run_grid
from workflows.inspection import run_steps
from workflows.models import WorkflowDefinitionVersion, WorkflowRun


@admin.register(WorkflowDefinitionVersion)
class WorkflowDefinitionAdmin(TenantScopedAdmin):
    change_form_template = "admin/workflows/workflowdefinitionversion/change_form.html"
    list_display = ("name", "version", "tenant", "created_at", "created_by")
    list_filter = ("tenant",)
    search_fields = ("name",)
    readonly_fields = ("definition_id", "tenant", "name", "version", "spec", "fingerprint",
                       "created_at", "created_by")

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> HttpResponse:
        """The definition, and its last ``?runs=N`` runs (default 25, at most 100) × steps."""
        raw = request.GET.get("runs", str(DEFAULT_RUNS))
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_RUNS:
            return HttpResponseBadRequest(
                f"runs must be a whole number from 1 to {MAX_RUNS}, not {raw[:20]!r}",
                content_type="text/plain")
        version = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if version is not None:
            context["grid"] = run_grid(version, runs=int(raw))
            context["grid_runs"] = int(raw)
        return super().change_view(request, object_id, form_url, extra_context=context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # defined through the API or the Python DSL, validated there

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # runs are pinned to their version


def graph_of(run: WorkflowRun) -> dict:
    """Nodes (one per step, placed by depth) and edges of the run's definition, with each
    step's state as the API shows it, for the page's script to draw; a sub_workflow step's
    node links to its child run's page (``child_url``)."""
    definition = engine.definition_of(run.definition)
    depth: dict[str, int] = {}
    for key in definition.order:
        parents = definition.step(key).parents
        depth[key] = 1 + max((depth[p] for p in parents), default=-1)
    rows: dict[int, int] = {}
    steps = run_steps(run)
    by_key = {s["key"]: s for s in steps if s["map_index"] is None}
    nodes = []
    for key in definition.order:
        column = depth[key]
        instances = [s for s in steps if s["key"] == key and s["map_index"] is not None]
        nodes.append({
            **by_key[key], "depth": column, "row": rows.setdefault(column, 0),
            "kind": str(definition.step(key).kind),
            "child_url": None if by_key[key]["child_run_id"] is None else reverse(
                "admin:workflows_workflowrun_change", args=[by_key[key]["child_run_id"]]),
            "instances": len(instances),
            "instances_done": sum(1 for s in instances if s["status"] in (
                "SUCCEEDED", "FAILED", "SKIPPED", "UPSTREAM_FAILED", "CANCELLED")),
        })
        rows[column] += 1
    edges = [[p, key] for key in definition.order for p in definition.step(key).parents]
    return {"run_id": str(run.run_id), "status": run.status, "nodes": nodes, "edges": edges,
            "finished": run.finished_at is not None}


@admin.register(WorkflowRun)
class WorkflowRunAdmin(TenantScopedAdmin):
    change_form_template = "admin/workflows/workflowrun/change_form.html"
    list_display = ("run_id", "name", "version", "tenant", "status", "created_at",
                    "finished_at")
    list_filter = ("status", "name", "tenant")
    search_fields = ("run_id", "name", "idempotency_key")
    list_select_related = ("definition", "tenant")
    fields = ("run_id", "name", "definition", "tenant", "status", "reason", "input", "queue",
              "idempotency_key", "created_at", "started_at", "finished_at", "deadline_at",
              "created_by")
    readonly_fields = fields
    show_full_result_count = False

    @admin.display(description="version")
    def version(self, run: WorkflowRun) -> int:
        return run.definition.version

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> HttpResponse:
        run = self.get_object(request, object_id)
        context = dict(extra_context or {})
        context["run_actions"] = run is not None and self.may_act(request, run.tenant_id)
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_urls(self):
        return [
            path("<uuid:run_id>/graph/", self.admin_site.admin_view(self.graph_view),
                 name="workflows_workflowrun_graph"),
            path("<uuid:run_id>/do/<str:action>/",
                 self.admin_site.admin_view(require_POST(self.action_view)),
                 name="workflows_workflowrun_do"),
            *super().get_urls(),
        ]

    def graph_view(self, request: HttpRequest, run_id) -> JsonResponse:
        return JsonResponse(graph_of(self.scoped_object_or_404(request, run_id=run_id)))

    def action_view(self, request: HttpRequest, run_id, action: str) -> HttpResponse:
        run = self.scoped_object_or_404(request, run_id=run_id)
        change = {"cancel": engine.cancel_run, "retry": engine.retry_run}.get(action)
        if change is None:
            return HttpResponse(status=404)
        if not self.may_act(request, run.tenant_id):
            return HttpResponse(status=403)
        try:
            change(run.run_id, tenant=run.tenant_id, by=f"user:{request.user}")
            self.message_user(request, f"{action.capitalize()}: done.", messages.SUCCESS)
        except engine.RunStateConflict as exc:
            self.message_user(request, f"Not {action}: {exc}", messages.ERROR)
        return HttpResponseRedirect(reverse("admin:workflows_workflowrun_change",
                                            args=[run.run_id]))
