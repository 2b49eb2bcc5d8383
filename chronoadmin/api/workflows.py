"""REST endpoints of workflows: definitions and their versions, starting runs, runs with every
step's state, cancel and retry from failure. Every queryset is the caller's tenant's; another
tenant's name or id is a 404, as an unknown one is.

``POST /api/v1/workflows/`` takes a definition as JSON (see :mod:`workflows.definitions`); a bad
one is a 400 listing every problem with its field path (``steps.load.parents[0]``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from chronoadmin.api.errors import NON_FIELD, Conflict
from chronoadmin.api.idempotency import HEADER as IDEMPOTENCY_HEADER
from chronoadmin.api.idempotency import idempotent
from chronoadmin.api.views import IDEMPOTENCY_PARAMETER, TenantViewSet
from workflows import engine
from workflows.errors import DefinitionError
from workflows.inspection import run_steps
from workflows.models import WorkflowDefinitionVersion, WorkflowRun, WorkflowRunStatus

RUN_FILTERS = ("workflow", "status")


class WorkflowVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkflowDefinitionVersion
        fields = ("definition_id", "name", "version", "spec", "fingerprint", "created_at",
                  "created_by")
        read_only_fields = fields


class WorkflowRunSerializer(serializers.ModelSerializer):
    version = serializers.IntegerField(source="definition.version", read_only=True)

    class Meta:
        model = WorkflowRun
        fields = ("run_id", "name", "version", "status", "input", "reason", "idempotency_key",
                  "queue", "created_at", "started_at", "finished_at", "deadline_at",
                  "created_by")
        read_only_fields = fields


class WorkflowRunDetailSerializer(WorkflowRunSerializer):
    steps = serializers.SerializerMethodField(
        help_text="Every step (and map instance) with its status, attempt, result or reason, "
                  "why it waits, and its execution's timings; a sub_workflow step's "
                  "child_run_id.")

    class Meta(WorkflowRunSerializer.Meta):
        fields = (*WorkflowRunSerializer.Meta.fields, "steps")
        read_only_fields = fields

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get_steps(self, run: WorkflowRun) -> list[dict[str, Any]]:
        return run_steps(run)


class StartRunSerializer(serializers.Serializer):
    input = serializers.JSONField(required=False, allow_null=True, default=None)
    version = serializers.IntegerField(required=False, min_value=1)
    queue = serializers.RegexField(r"^[A-Za-z0-9_.:-]{1,200}$", required=False)


def _definition_error(exc: DefinitionError) -> ValidationError:
    return ValidationError({"errors": [p.to_dict() for p in exc.problems]})


@extend_schema(tags=["workflows"])
class WorkflowViewSet(mixins.ListModelMixin, TenantViewSet):
    """Workflow definitions of the caller's tenant: the latest version of each name."""

    queryset = WorkflowDefinitionVersion.objects.none()
    serializer_class = WorkflowVersionSerializer
    lookup_field = "name"
    ordering_fields = ("created_at",)

    def get_queryset(self):
        return (WorkflowDefinitionVersion.objects.filter(tenant=self.tenant)
                .order_by("name", "-version").distinct("name"))

    def list(self, request: Request, *args, **kwargs) -> Response:
        versions = list(self.get_queryset())
        return Response({"results": WorkflowVersionSerializer(versions, many=True).data})

    @extend_schema(request=OpenApiTypes.OBJECT, responses={201: WorkflowVersionSerializer,
                                                           200: WorkflowVersionSerializer})
    def create(self, request: Request) -> Response:
        """Define a workflow, or a new version of one (an identical spec: 200, no new one)."""
        if not isinstance(request.data, dict):
            raise ValidationError({NON_FIELD: ["Send the definition as a JSON object."]})
        latest = (WorkflowDefinitionVersion.objects.filter(
            tenant=self.tenant, name=request.data.get("name")).order_by("-version").first()
            if isinstance(request.data.get("name"), str) else None)
        try:
            version = engine.define(self.tenant, request.data,
                                    by=f"api-key:{request.auth.prefix}")
        except DefinitionError as exc:
            raise _definition_error(exc) from None
        created = latest is None or latest.definition_id != version.definition_id
        return Response(WorkflowVersionSerializer(version).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def retrieve(self, request: Request, name: str) -> Response:
        versions = list(WorkflowDefinitionVersion.objects.filter(tenant=self.tenant, name=name)
                        .order_by("-version"))
        if not versions:
            raise NotFound("No workflow with this name.")
        return Response({**WorkflowVersionSerializer(versions[0]).data,
                         "versions": [{"version": v.version, "created_at": v.created_at,
                                       "fingerprint": v.fingerprint} for v in versions]})

    @extend_schema(responses=WorkflowVersionSerializer)
    @action(detail=True, methods=["get"], url_path=r"versions/(?P<version>[0-9]+)")
    def version(self, request: Request, name: str, version: str) -> Response:
        stored = WorkflowDefinitionVersion.objects.filter(
            tenant=self.tenant, name=name, version=int(version)).first()
        if stored is None:
            raise NotFound("No such version of this workflow.")
        return Response(WorkflowVersionSerializer(stored).data)

    @extend_schema(request=StartRunSerializer, parameters=[IDEMPOTENCY_PARAMETER],
                   responses={201: WorkflowRunDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def runs(self, request: Request, name: str) -> Response:
        """Start a run of this workflow (its latest version unless ``version`` is given)."""
        body = StartRunSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        try:
            run = engine.start_run(
                name, tenant=self.tenant, run_input=body.validated_data.get("input"),
                version=body.validated_data.get("version"),
                queue=body.validated_data.get("queue"),
                idempotency_key=request.headers.get(IDEMPOTENCY_HEADER),
                by=f"api-key:{request.auth.prefix}")
        except engine.WorkflowNotFound as exc:
            raise NotFound(str(exc)) from None
        return Response(WorkflowRunDetailSerializer(run).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["workflows"], parameters=[
    OpenApiParameter("workflow", str, description="Runs of this workflow name only."),
    OpenApiParameter("status", str, enum=WorkflowRunStatus.values),
])
class WorkflowRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Runs of the caller's tenant's workflows, newest first, with cursor pages."""

    queryset = WorkflowRun.objects.none()
    serializer_class = WorkflowRunSerializer
    lookup_field = "run_id"
    filter_backends: list = []

    def get_queryset(self):
        runs = WorkflowRun.objects.filter(tenant=self.tenant).select_related("definition")
        params = self.request.query_params
        unknown = sorted(set(params) - {*RUN_FILTERS, "cursor", "page_size"})
        if unknown:
            raise ValidationError({unknown[0]: [f"Unknown filter; use one of "
                                                f"{', '.join(RUN_FILTERS)}."]})
        if "workflow" in params:
            runs = runs.filter(name=params["workflow"])
        if "status" in params:
            if params["status"] not in WorkflowRunStatus.values:
                raise ValidationError({"status": [f"Use one of "
                                                  f"{', '.join(WorkflowRunStatus.values)}."]})
            runs = runs.filter(status=params["status"])
        return runs

    def get_serializer_class(self):
        return WorkflowRunDetailSerializer if self.action != "list" else WorkflowRunSerializer

    def _run_action(self, request: Request, change) -> Response:
        if request.data:
            raise ValidationError({NON_FIELD: ["This action takes no body; send none or {}."]})
        run = self.get_object()
        try:
            run = change(run.run_id, tenant=self.tenant, by=f"api-key:{request.auth.prefix}")
        except engine.RunStateConflict as exc:
            raise Conflict(str(exc)) from None
        run.refresh_from_db()
        return Response(WorkflowRunDetailSerializer(run).data)

    @extend_schema(request=None, responses=WorkflowRunDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, run_id: str) -> Response:
        """Cancel the run: pending steps never start, running ones are stopped."""
        return self._run_action(request, engine.cancel_run)

    @extend_schema(request=None, responses=WorkflowRunDetailSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, run_id: str) -> Response:
        """Retry a FAILED or TIMED_OUT run from its failures (409 in any other state)."""
        return self._run_action(request, engine.retry_run)
