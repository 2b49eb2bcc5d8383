"""The API's views. Tenant endpoints scope every queryset to the caller's tenant, so another
tenant's id answers 404 exactly like an id that does not exist. Input is checked by the one
validator of job specs (:mod:`scheduler.specs`, through the serializers); jobs are written by the
one job writer (:mod:`scheduler.job_writer`: a create here, bulk through
:mod:`chronoadmin.api.bulk`) and changed by :mod:`scheduler.api`. No business rule lives here."""

from __future__ import annotations

import uuid
from dataclasses import replace

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone as dj_timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, Throttled, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from chronoadmin.api import bulk, quota
from chronoadmin.api.errors import NON_FIELD, Conflict, RequestTooLarge
from chronoadmin.api.filters import (
    ExecutionFilter,
    JobFilter,
    StrictFilterBackend,
    StrictOrderingFilter,
    TaskGrantFilter,
)
from chronoadmin.api.idempotency import HEADER as IDEMPOTENCY_HEADER
from chronoadmin.api.idempotency import idempotent
from chronoadmin.api.pagination import ChronoCursorPagination
from chronoadmin.api.parsers import LimitedJSONParser, NDJSONParser
from chronoadmin.api.serializers import (
    JOB_CREATE_SCHEMA,
    ApiKeyCreatedSerializer,
    ApiKeySerializer,
    BulkResultSerializer,
    ExecutionSerializer,
    JobCreateSerializer,
    JobDetailSerializer,
    JobSerializer,
    JobUpdateSerializer,
    TaskGrantSerializer,
    TenantSerializer,
    WorkerSerializer,
)
from chronocore import grants
from chronocore.config import get_config
from chronocore.models import ApiKey, TaskGrant, Tenant
from chronocore.rest.permissions import IsPlatformAdmin, IsTenantClient, tenant_of
from chronocore.rest.throttling import TenantRateThrottle
from reaper.models import Worker
from scheduler import api as scheduler_api
from scheduler import job_writer
from scheduler.errors import ExecutionNotRetryable
from scheduler.models import Execution, Job, JobStatus
from search.api import HIDDEN_FROM_TENANTS, run_log_search
from search.errors import InvalidAuditQuery
from search.log_queries import parse_log_query
from search.log_stream import LEVELS as LOG_LEVELS

LOG_PARAMETERS = [
    OpenApiParameter("attempt", OpenApiTypes.INT, description="Only this attempt's lines."),
    OpenApiParameter("level", OpenApiTypes.STR, enum=list(LOG_LEVELS),
                     description="Lines at this level and above."),
    OpenApiParameter("q", OpenApiTypes.STR, description=(
        "Words to find in the message, the error or the logger's name (simple query syntax: "
        "\"quoted phrase\", -exclude, prefix*).")),
    OpenApiParameter("after", OpenApiTypes.DATETIME,
                     description="Lines logged at or after this time (ISO 8601)."),
    OpenApiParameter("before", OpenApiTypes.DATETIME,
                     description="Lines logged before this time (ISO 8601)."),
    OpenApiParameter("page_size", OpenApiTypes.INT),
    OpenApiParameter("cursor", OpenApiTypes.STR,
                     description="From the previous page's next, or its follow."),
]
LOG_PAGE_SCHEMA = {
    "type": "object",
    "properties": {
        "execution_id": {"type": "string", "format": "uuid"},
        "status": {"type": "string", "description": "The execution's status now."},
        "attempt": {"type": "integer", "description": "The execution's current attempt."},
        "count": {"type": "integer", "description": "Lines matching the filters."},
        "next": {"type": "string", "format": "uri", "nullable": True},
        "follow": {"type": "string", "format": "uri", "nullable": True, "description": (
            "Ask this again later for the lines logged after this page (null: no line yet "
            "and no cursor given).")},
        "results": {"type": "array", "items": {"type": "object", "additionalProperties": True,
                    "description": "timestamp, attempt, sequence, level, logger, message, "
                                   "error, thread, worker_id (and dropped_lines, dropped_bytes "
                                   "on the line saying what was dropped)."}},
    },
}

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER, {"type": "string", "minLength": 1, "maxLength": 200,
                         "pattern": r"^[\x21-\x7e]+$"},
    OpenApiParameter.HEADER, required=False,
    description="Any unique string (e.g. a UUID): a retry with the same key and body gets the "
    "first response again; with another body, 422. Kept 24 h per tenant.",
)

BULK_ITEMS_SCHEMA = {
    "type": "array", "items": {"$ref": "#/components/schemas/JobCreateRequest"},
    "description": "Jobs, each as for POST /api/v1/jobs/.",
}


class ChronoViewSet(viewsets.GenericViewSet):
    """Throttling, strict filters and cursor pages shared by every endpoint."""

    throttle_classes = [TenantRateThrottle]
    # Any path segment reaches the view, which answers a JSON 404 for an id it does not know
    # (the router's default stops at a dot and leaves Django's HTML 404).
    lookup_value_regex = "[^/]+"
    filter_backends = [StrictFilterBackend, StrictOrderingFilter]
    pagination_class = ChronoCursorPagination
    ordering_fields: tuple[str, ...] = ("created_at",)
    ordering: tuple[str, ...] = ("-created_at", "-pk")

    def max_request_bytes(self) -> int:
        # DRF builds its views per request: the process edge, nothing owns them to hand them the
        # configuration (here and in the views below).
        return get_config().api_max_request_bytes

    def get_object(self):
        try:
            return super().get_object()
        except Http404:
            # The same answer whether the id does not exist or belongs to another tenant.
            name = self.get_queryset().model._meta.verbose_name
            raise NotFound(f"No {name} with this id.") from None

    def throttled(self, request: Request, wait: float | None) -> None:
        rate = get_config().api_rate_per_minute
        raise Throttled(wait, detail=f"Rate limit of {rate} requests a minute reached.")


class TenantViewSet(ChronoViewSet):
    """An endpoint acting for the tenant of the caller's API key."""

    permission_classes = [IsTenantClient]

    @property
    def tenant(self) -> Tenant:
        tenant = tenant_of(self.request)
        assert tenant is not None  # IsTenantClient ran first
        return tenant


def _no_body(request: Request) -> None:
    if request.data:
        raise ValidationError({NON_FIELD: ["This action takes no body; send none or {}."]})


@extend_schema(tags=["jobs"])
class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Jobs of the caller's tenant: one-time (``run_at`` / ``delay_ms``) and cron."""

    queryset = Job.objects.none()  # the model, for the schema; get_queryset scopes it
    serializer_class = JobSerializer
    filterset_class = JobFilter
    ordering_fields = ("created_at", "updated_at")
    lookup_field = "job_id"

    def get_queryset(self) -> QuerySet[Job]:
        return Job.objects.for_tenant(self.tenant)

    def get_serializer_class(self):
        return JobDetailSerializer if self.action != "list" else JobSerializer

    def max_request_bytes(self) -> int:
        if self.action == "bulk":
            return get_config().bulk_max_request_bytes
        return super().max_request_bytes()

    @extend_schema(
        request=JOB_CREATE_SCHEMA,
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={201: JobDetailSerializer},
    )
    @idempotent
    def create(self, request: Request) -> Response:
        serializer = JobCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota.check_quota(self.tenant.tenant_id, 1)
        job = job_writer.create(self.tenant.tenant_id, serializer.validated_data)
        quota.count_created(self.tenant.tenant_id, 1)
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=JobUpdateSerializer, responses={200: JobDetailSerializer})
    def partial_update(self, request: Request, job_id: str) -> Response:
        """Change when the job fires and how its occurrences run: the lock, every rule and the
        write are :func:`scheduler.api.update`'s (an unknown job answers 404 whatever the body,
        an ended one 409, one whose grant was removed 403, a body that breaks a rule 400)."""
        job = scheduler_api.update(job_id, tenant=self.tenant, changes=request.data)
        return Response(JobDetailSerializer(job).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, job_id: str) -> Response:
        job = self.get_object()
        scheduler_api.delete(job.job_id, tenant=self.tenant)
        return Response(status=status.HTTP_204_NO_CONTENT)

    # Actions. Repeating one that already took effect answers 200 (idempotent); one the job's
    # state does not allow answers 409 saying why.

    def _act(self, request: Request, *, run, done_status: str | None, refusal: str) -> Response:
        _no_body(request)
        job = self.get_object()
        changed = run(job.job_id, tenant=self.tenant)
        job.refresh_from_db()
        if not changed and job.status != done_status:
            raise Conflict(refusal.format(status=job.status))
        return Response(JobDetailSerializer(job).data)

    @extend_schema(request=None, parameters=[IDEMPOTENCY_PARAMETER],
                   responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def pause(self, request: Request, job_id: str) -> Response:
        """Stop firing the job until it is resumed."""
        return self._act(request, run=scheduler_api.pause, done_status=JobStatus.PAUSED,
                         refusal="The job is {status}; only an ACTIVE job can be paused.")

    @extend_schema(request=None, parameters=[IDEMPOTENCY_PARAMETER],
                   responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def resume(self, request: Request, job_id: str) -> Response:
        """Fire a paused job again: a cron job from its next occurrence after now."""
        return self._act(request, run=scheduler_api.resume, done_status=JobStatus.ACTIVE,
                         refusal="The job is {status}; only a PAUSED job can be resumed.")

    @extend_schema(request=None, parameters=[IDEMPOTENCY_PARAMETER],
                   responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def trigger(self, request: Request, job_id: str) -> Response:
        """Fire an ACTIVE job now, once; a cron job then keeps its schedule."""
        return self._act(request, run=scheduler_api.trigger, done_status=None,
                         refusal="The job is {status}; only an ACTIVE job can be triggered "
                                 "(resume a PAUSED job first).")

    @extend_schema(request=None, parameters=[IDEMPOTENCY_PARAMETER],
                   responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def cancel(self, request: Request, job_id: str) -> Response:
        """Cancel the job: nothing more fires, executions not yet started never start."""
        by = f"api-key:{request.auth.prefix}"
        return self._act(
            request, run=lambda job_id, tenant: scheduler_api.cancel(job_id, tenant=tenant, by=by),
            done_status=JobStatus.CANCELLED,
            refusal="The job is {status}; there is nothing left to cancel.",
        )

    @extend_schema(
        request={
            "application/json": BULK_ITEMS_SCHEMA,
            "application/x-ndjson": BULK_ITEMS_SCHEMA | {
                "description": "The same jobs, one JSON object a line (NDJSON)."},
        },
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={
            201: OpenApiResponse(BulkResultSerializer, description="Every item was created."),
            200: OpenApiResponse(BulkResultSerializer,
                                 description="Some items were created; errors lists the rest."),
            400: OpenApiResponse(BulkResultSerializer, description="No item was created."),
        },
    )
    @action(detail=False, methods=["post"], url_path="bulk",
            parser_classes=[LimitedJSONParser, NDJSONParser])
    @idempotent
    def bulk(self, request: Request) -> Response:
        """Create up to ``bulk_max_items`` jobs in one request; each item is a job as for create.
        Valid items are created even when others fail."""
        items = request.data
        if not isinstance(items, list):
            raise ValidationError({NON_FIELD: [
                "Send a JSON array of jobs, or NDJSON (one job a line) with Content-Type "
                "application/x-ndjson."
            ]})
        limit = get_config().bulk_max_items
        if not items:
            raise ValidationError({NON_FIELD: ["The request holds no job; send 1 or more."]})
        if len(items) > limit:
            raise RequestTooLarge(
                f"The request holds {len(items)} jobs; at most {limit} are accepted per request. "
                "Split it into several requests."
            )
        result = bulk.ingest(self.tenant.tenant_id, items, job_writer.current_limits())
        created = result.created
        code = (status.HTTP_201_CREATED if created == len(items)
                else status.HTTP_200_OK if created else status.HTTP_400_BAD_REQUEST)
        return Response(result.as_dict(), status=code)


@extend_schema(tags=["executions"])
class ExecutionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Executions (occurrences) of the caller's tenant's jobs."""

    queryset = Execution.objects.none()  # the model, for the schema; get_queryset scopes it
    serializer_class = ExecutionSerializer
    filterset_class = ExecutionFilter
    ordering_fields = ("scheduled_for",)
    ordering = ("-scheduled_for", "-pk")
    lookup_field = "execution_id"

    def get_queryset(self) -> QuerySet[Execution]:
        return Execution.objects.for_tenant(self.tenant)

    @extend_schema(request=None, parameters=[IDEMPOTENCY_PARAMETER],
                   responses={200: ExecutionSerializer})
    @action(detail=True, methods=["post"])
    @idempotent
    def retry(self, request: Request, execution_id: str) -> Response:
        """Run a FAILED, DEAD_LETTERED or LOST execution once more, as its next attempt (409 in
        any other state)."""
        _no_body(request)
        execution = self.get_object()
        try:
            scheduler_api.retry_execution(execution.execution_id, tenant=self.tenant,
                                          by=f"api-key:{request.auth.prefix}")
        except ExecutionNotRetryable as exc:
            raise Conflict(str(exc)) from None
        execution.refresh_from_db()
        return Response(ExecutionSerializer(execution, context={"request": request}).data)


    @extend_schema(
        operation_id="executions_logs",
        parameters=LOG_PARAMETERS,
        responses={200: OpenApiResponse(LOG_PAGE_SCHEMA), 503: OpenApiResponse(
            description="The search engine did not answer.")},
    )
    @action(detail=True, methods=["get"], filter_backends=[], pagination_class=None)
    def logs(self, request: Request, execution_id: str) -> Response:
        """The execution's log lines (what its task logged while it ran, every attempt), in the
        order they were logged; ``follow`` is the cursor to ask again with for lines written
        since (a running execution)."""
        execution = _tenant_execution(self.get_queryset(), execution_id)
        config = get_config()
        try:
            query = parse_log_query(
                request.query_params, execution_id=str(execution.execution_id),
                tenant_id=str(self.tenant.tenant_id),
                default_page_size=config.api_default_page_size,
                max_page_size=config.api_max_page_size)
        except InvalidAuditQuery as exc:
            raise ValidationError(exc.errors) from None
        page = run_log_search(replace(query, hidden_fields=HIDDEN_FROM_TENANTS), config=config)
        return Response({
            "execution_id": str(execution.execution_id),
            "status": execution.status,
            "attempt": execution.attempt,
            "count": page.total,
            "next": _with_cursor(request, page.next_cursor),
            "follow": _with_cursor(request, page.follow_cursor),
            "results": page.lines,
        })


def _tenant_execution(queryset: QuerySet[Execution], execution_id: str) -> Execution:
    """The execution ``execution_id`` among ``queryset`` (the tenant's): 404 otherwise, as for an
    id that does not exist."""
    try:
        key = uuid.UUID(str(execution_id))
    except ValueError:
        raise NotFound("No execution with this id.") from None
    execution = queryset.filter(execution_id=key).only(
        "execution_id", "status", "attempt", "tenant_id").first()
    if execution is None:
        raise NotFound("No execution with this id.")
    return execution


def _with_cursor(request: Request, cursor: str | None) -> str | None:
    if not cursor:
        return None
    params = request.query_params.copy()
    params["cursor"] = cursor
    return request.build_absolute_uri(f"{request.path}?{params.urlencode()}")


class PlatformViewSet(ChronoViewSet):
    """Endpoints spanning tenants: staff users (session) only."""

    permission_classes = [IsPlatformAdmin]


@extend_schema(tags=["platform"])
class WorkerViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    """Workers serve queues, not tenants, so only platform administrators see them."""

    queryset = Worker.objects.all()
    serializer_class = WorkerSerializer
    ordering_fields = ("started_at", "last_heartbeat_at")
    ordering = ("-started_at", "-pk")


@extend_schema(tags=["platform"])
class TenantAdminViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin,
                         mixins.CreateModelMixin, mixins.UpdateModelMixin, PlatformViewSet):
    """Tenants. Disable one with ``is_active: false`` (its keys stop working); no delete."""

    queryset = Tenant.objects.all()
    serializer_class = TenantSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]


@extend_schema(tags=["platform"])
class ApiKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    """Tenants' API keys. Creating one returns the key once; DELETE revokes it (kept for audit)."""

    queryset = ApiKey.objects.select_related("tenant")
    serializer_class = ApiKeySerializer

    @extend_schema(request=ApiKeySerializer, responses={201: ApiKeyCreatedSerializer})
    def create(self, request: Request) -> Response:
        serializer = ApiKeySerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        api_key, full_key = ApiKey.objects.issue(
            tenant=serializer.validated_data["tenant"],
            name=serializer.validated_data.get("name", ""),
        )
        data = ApiKeySerializer(api_key).data | {"key": full_key}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        api_key = self.get_object()
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=dj_timezone.now()
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["platform"])
class TaskGrantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    """Tenants' task grants (docs/security.md). POST grants (200 with the grant when it was
    already there, 201 when new); DELETE revokes. ``?tenant=<id>`` or ``?tenant_slug=<slug>``
    lists one tenant's."""

    queryset = TaskGrant.objects.select_related("tenant")
    serializer_class = TaskGrantSerializer
    http_method_names = ["get", "post", "delete", "head", "options"]

    filterset_class = TaskGrantFilter

    def create(self, request: Request) -> Response:
        serializer = TaskGrantSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        task_grant, created = grants.grant(
            data["tenant"], data["task_pattern"], data.get("queue_pattern", grants.EVERYTHING),
            by=f"api:{request.user.get_username()}")
        return Response(TaskGrantSerializer(task_grant).data,
                        status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        self.get_object().delete()
        return Response(status=status.HTTP_204_NO_CONTENT)

