"""Admin pages of jobs and executions: what is scheduled, what ran, how late, with what result.

A job changes only through :mod:`scheduler.api`, as from the REST API: the admin's actions pause,
resume, trigger and cancel, and its delete, call it, so each change is validated, audited with the
staff user as actor, reaches the job's timer in Redis and takes the job's lock (a delete racing the
beat's insert of an execution leaves none behind). Its form edits the name and the exclusion
calendars (through :func:`scheduler.api.configure`, checked as the REST API checks them); a
job's schedule and options change through the API (a row edited here would not move its
timer). Jobs are created through the API, and executions by the beat: neither is added here.

Both are scoped by tenant (:class:`chronocore.staff.TenantScopedAdmin`): a tenant's staff see
their tenant's jobs and executions and nothing else (another tenant's id answers 404, on every
page and button), and act on them (the buttons, the list's actions, retry) with the operator
role; a failure's traceback is for platform staff only, as in the REST API.

An execution's page shows its log lines and, while it runs, follows them: its script
(``scheduler/static/scheduler/execution_logs.js``, no inline script, so a ``script-src 'self'``
policy lets it run) asks the page's ``logs/`` endpoint for the lines after the last one shown
every 1.5 s, until the execution is final and nothing more came.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from chronocore.config import get_config
from chronocore.staff import TenantScopedAdmin, scope_of
from scheduler import api, calendar_store
from scheduler.calendars import calendar_names_problem
from scheduler.clock import now_ms
from scheduler.errors import InvalidJob, JobNotFound, SchedulerError
from scheduler.fire_times import fire_time_rows, upcoming_fire_ms
from scheduler.intervals import describe_period
from scheduler.lifecycle import IN_FLIGHT
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus, JobWatch
from scheduler.specs import stored_schedule
from search.api import (
    HIDDEN_FROM_TENANTS,
    SearchEngineUnavailable,
    run_log_search,
    run_search,
)
from search.log_queries import parse_log_query
from search.log_stream import LEVELS as LOG_LEVELS
from search.queries import InvalidAuditQuery, parse_audit_query

FIRE_TIMES_SHOWN = 10
EXECUTIONS_PER_PAGE = 20
LEDGER_SHOWN = 20
HISTORY_SHOWN = 25
# The job-page buttons: the api call of each, and the statuses in which it applies.
JOB_ACTIONS: dict[str, tuple[str, Callable[..., bool], tuple[str, ...]]] = {
    "pause": ("Pause", api.pause, (JobStatus.ACTIVE,)),
    "resume": ("Resume", api.resume, (JobStatus.PAUSED,)),
    "trigger": ("Run now", api.trigger, (JobStatus.ACTIVE, JobStatus.PAUSED)),
    "cancel": ("Cancel", api.cancel, (JobStatus.ACTIVE, JobStatus.PAUSED)),
}


def duration_ms(start, end) -> int | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000)


def _job_action(
    name: str, description: str, change: Callable[..., bool]
) -> Callable[[admin.ModelAdmin, HttpRequest, QuerySet], None]:
    """An admin action applying ``change(job_id, tenant=…)`` of :mod:`scheduler.api` to each
    selected job, reporting how many changed and why the others did not."""

    def action(model_admin: JobAdmin, request: HttpRequest, queryset: QuerySet) -> None:
        changed, unchanged = 0, []
        for job in model_admin.acting_rows(request, queryset).only("job_id", "tenant_id",
                                                                   "status"):
            try:
                if change(job.job_id, tenant=job.tenant_id):
                    changed += 1
                else:
                    unchanged.append(f"{job.job_id} ({job.status})")
            except SchedulerError as exc:
                unchanged.append(f"{job.job_id}: {exc}")
        if changed:
            model_admin.message_user(request, f"{description}: {changed} job(s).", messages.SUCCESS)
        if unchanged:
            model_admin.message_user(request, f"Not {description.lower()}: "
                                     + ", ".join(unchanged[:20]), messages.WARNING)

    action.__name__ = name
    return admin.action(description=f"{description} the selected jobs",
                        permissions=["change"])(action)


class OriginFilter(admin.SimpleListFilter):
    """The steps of workflow runs are one-time jobs too (one per attempt, watched by the
    engine: :class:`~scheduler.models.JobWatch`); the list shows the jobs people and apps
    scheduled unless asked for the steps. A step's own page stays reachable from its run."""

    title = "origin"
    parameter_name = "origin"
    CHOICES = ((None, "Scheduled jobs"), ("steps", "Workflow steps"), ("all", "All"))

    def lookups(self, request: HttpRequest, model_admin) -> tuple:
        return self.CHOICES[1:]

    def choices(self, changelist):
        for value, label in self.CHOICES:
            yield {"selected": self.value() == value, "display": label,
                   "query_string": changelist.get_query_string(
                       {self.parameter_name: value} if value else {}, [self.parameter_name])}

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        watched = Exists(JobWatch.objects.filter(job_id=OuterRef("pk")))
        if self.value() == "all":
            return queryset
        if self.value() == "steps":
            return queryset.filter(watched)
        return queryset.exclude(watched)


class JobForm(forms.ModelForm):
    """The job page's form: its name, and its calendars checked against its tenant's."""

    class Meta:
        model = Job
        fields = ("name", "calendars")

    def clean_calendars(self) -> list[str]:
        names = list(self.cleaned_data.get("calendars") or [])
        job = self.instance
        if names == list(job.calendars):
            return names
        if problem := calendar_names_problem(names):
            raise forms.ValidationError(problem)
        if names and not job.is_recurring:
            raise forms.ValidationError("calendars apply to cron and interval jobs only.")
        try:
            calendar_store.check_job_calendars(job.tenant_id, names, stored_schedule(job),
                                               now_ms=now_ms())
        except InvalidJob as exc:
            raise forms.ValidationError(exc.message) from None
        return names


@admin.register(Job)
class JobAdmin(TenantScopedAdmin):
    list_display = (
        "job_type", "name", "tenant", "status", "schedule", "timezone", "next_run_at",
        "queue", "created_at",
    )
    list_filter = (OriginFilter, "status", "queue", "tenant")
    search_fields = ("job_id", "job_type", "name", "idempotency_key")
    date_hierarchy = "created_at"
    list_select_related = ("tenant",)
    show_full_result_count = False
    actions = (
        _job_action("pause_jobs", "Paused", api.pause),
        _job_action("resume_jobs", "Resumed", api.resume),
        _job_action("trigger_jobs", "Triggered", api.trigger),
        _job_action("cancel_jobs", "Cancelled", api.cancel),
    )

    change_form_template = "admin/scheduler/job/change_form.html"
    form = JobForm

    @admin.display(description="schedule", ordering="cron_expression")
    def schedule(self, job: Job) -> str:
        """A cron job's expression, an interval job's period, or "once"."""
        if job.cron_expression:
            return job.cron_expression
        if job.interval_ms:
            return f"every {describe_period(job.interval_ms)}"
        return "once"

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        return [f.name for f in Job._meta.fields if f.name not in ("name", "calendars")]

    def save_model(self, request: HttpRequest, obj: Job, form, change: bool) -> None:
        # The name is saved as it is; new calendars go through the API (checked again under
        # the job's lock, audited with the staff user as actor).
        calendars = list(obj.calendars)
        if "calendars" in form.changed_data:
            obj.calendars = list(Job.objects.values_list("calendars", flat=True).get(pk=obj.pk))
        super().save_model(request, obj, form, change)
        if "calendars" in form.changed_data:
            api.configure(obj.job_id, tenant=obj.tenant_id, calendars=calendars,
                          by=f"user:{request.user}")
            obj.calendars = calendars

    def get_urls(self):
        return [
            path("<uuid:job_id>/do/<str:action>/",
                 self.admin_site.admin_view(require_POST(self.job_action_view)),
                 name="scheduler_job_do"),
            *super().get_urls(),
        ]

    def job_action_view(self, request: HttpRequest, job_id, action: str) -> HttpResponse:
        """One button of the job page: the same :mod:`scheduler.api` call as the REST API's."""
        job = self.scoped_object_or_404(request, job_id=job_id)
        if action not in JOB_ACTIONS or not self.may_act(request, job.tenant_id):
            return HttpResponse(status=403)
        label, change, _ = JOB_ACTIONS[action]
        try:
            changed = change(job.job_id, tenant=job.tenant_id, by=f"user:{request.user}")
        except SchedulerError as exc:
            self.message_user(request, f"{label}: {exc}", messages.ERROR)
        else:
            self.message_user(request, f"{label}: done." if changed else
                              f"{label}: nothing to do while the job is {job.status}.",
                              messages.SUCCESS if changed else messages.WARNING)
        return HttpResponseRedirect(reverse("admin:scheduler_job_change", args=[job.job_id]))

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> HttpResponse:
        job = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if job is not None:
            context.update(job_page_context(request, job))
            if not self.may_act(request, job.tenant_id):
                context["job_actions"] = []
        return super().change_view(request, object_id, form_url, extra_context=context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_deleted_objects(self, objs, request: HttpRequest):
        # A job's executions go with it (api.delete), although no one may delete one alone.
        to_delete, model_count, _, protected = super().get_deleted_objects(objs, request)
        return to_delete, model_count, set(), protected

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        api.delete(obj.job_id, tenant=obj.tenant_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for job_id, tenant_id in self.acting_rows(request, queryset).values_list("job_id",
                                                                                 "tenant_id"):
            try:
                api.delete(job_id, tenant=tenant_id)
            except JobNotFound:
                continue  # deleted meanwhile


def job_page_context(request: HttpRequest, job: Job) -> dict[str, object]:
    """What the job page shows beyond its fields: buttons, next fire times, executions, the
    ledger of skipped occurrences and the audit history."""
    executions = Execution.objects.filter(job_id=job.job_id).order_by("-scheduled_for")
    page = Paginator(executions, EXECUTIONS_PER_PAGE).get_page(request.GET.get("executions"))
    for execution in page:
        execution.duration_ms = duration_ms(execution.started_at, execution.finished_at)
        execution.lateness_ms = duration_ms(execution.scheduled_for, execution.started_at)
    return {
        "job_actions": [(name, label) for name, (label, _, statuses) in JOB_ACTIONS.items()
                        if job.status in statuses],
        "fire_times": (fire_time_rows(upcoming_fire_ms(job, FIRE_TIMES_SHOWN), job.timezone)
                       if job.status == JobStatus.ACTIVE else []),
        "executions_page": page,
        "ledger": list(executions.filter(status=ExecutionStatus.SKIPPED)[:LEDGER_SHOWN]),
        **job_history(job),
    }


LOG_LINES_SHOWN = 500
LOG_FILTERS = ("log_attempt", "log_level", "log_q", "log_cursor")
# An execution that ended this recently is still followed: its last lines reach the engine
# about 2 s after they were logged (flush 1 s, the shipper's poll, the stream's 1 s refresh).
LOG_SETTLE = timedelta(seconds=10)


def audit_rows(filters: dict[str, str], tenant_id) -> tuple[list[dict[str, object]], str]:
    """Audit events matching ``filters`` of one tenant, newest first, from the search engine, as
    the admin's tables show them; with the reason there are none when it did not answer."""
    try:
        query = parse_audit_query(filters, tenant_id=str(tenant_id),
                                  default_page_size=HISTORY_SHOWN, max_page_size=HISTORY_SHOWN)
        # The admin's pages are Django views: the process edge, nothing to hand them one.
        documents = run_search(query, config=get_config()).documents
    except (SearchEngineUnavailable, InvalidAuditQuery) as exc:
        return [], str(getattr(exc, "detail", exc))
    return [
        {"timestamp": d.get("@timestamp", ""), "action": d.get("event", {}).get("action", ""),
         "attempt": d.get("chrono", {}).get("attempt", ""),
         "worker": d.get("chrono", {}).get("worker_id", ""),
         "actor": d.get("chrono", {}).get("actor", ""), "message": d.get("message", "")}
        for d in documents
    ], ""


def execution_log_lines(execution: Execution, params, *, platform: bool) -> dict[str, object]:
    """One page of the execution's log lines for its admin page (``log_attempt``,
    ``log_level``, ``log_q`` and ``log_cursor`` filter and page it, as ``attempt``, ``level``,
    ``q`` and ``cursor`` do the API's), with the reason there are none when the engine did not
    answer or a filter is wrong."""
    filters = {name.removeprefix("log_"): value for name, value in params.items()
               if name in LOG_FILTERS}
    try:
        page = _log_page(execution, filters, platform=platform)
    except (InvalidAuditQuery, SearchEngineUnavailable) as exc:
        return {"log_lines": [], "log_error": _log_problem(exc), "log_filters": filters,
                "log_levels": LOG_LEVELS}
    next_link = ""
    if page.next_cursor:
        following = params.copy()
        following["log_cursor"] = page.next_cursor
        next_link = f"?{following.urlencode()}#execution-logs"
    follow_url = reverse("admin:scheduler_execution_logs", args=[execution.execution_id])
    follow_filters = {name: value for name, value in params.items()
                      if name in LOG_FILTERS and name != "log_cursor"}
    if follow_filters:
        follow_url += f"?{urlencode(follow_filters)}"
    return {"log_lines": page.lines, "log_error": "", "log_total": page.total,
            "log_next": next_link, "log_filters": filters, "log_levels": LOG_LEVELS,
            # Followed live from the last page only ("More lines" pages the others).
            "log_live": not page.next_cursor and log_is_live(execution),
            "log_follow_cursor": page.follow_cursor or "",
            "log_follow_url": follow_url}


def execution_log_follow(execution: Execution, params, *, platform: bool) -> tuple[dict, int]:
    """The answer of the execution page's ``logs/`` endpoint, which its script polls: the
    lines after ``log_cursor`` (with the page's filters), the cursor to ask with next, the
    execution's status and whether to keep asking; with its HTTP status."""
    filters = {name.removeprefix("log_"): value for name, value in params.items()
               if name in LOG_FILTERS}
    try:
        page = _log_page(execution, filters, platform=platform)
    except InvalidAuditQuery as exc:
        return {"error": _log_problem(exc)}, 400
    except SearchEngineUnavailable as exc:
        return {"error": _log_problem(exc)}, 503
    return {"status": execution.status, "live": log_is_live(execution),
            "lines": page.lines, "total": page.total, "more": page.next_cursor is not None,
            "follow": page.follow_cursor or filters.get("cursor") or ""}, 200


def log_is_live(execution: Execution) -> bool:
    """Whether lines of the execution may still come: it waits or runs, or ended a moment
    ago (its last lines are on their way to the engine)."""
    if execution.status in IN_FLIGHT:
        return True
    ended = execution.finished_at
    return ended is not None and timezone.now() - ended < LOG_SETTLE


def _log_page(execution: Execution, filters: dict[str, str], *, platform: bool):
    query = parse_log_query(filters, execution_id=str(execution.execution_id),
                            tenant_id=str(execution.tenant_id),
                            default_page_size=LOG_LINES_SHOWN, max_page_size=LOG_LINES_SHOWN)
    if not platform:  # a tenant's staff: stack traces are for platform staff
        query = replace(query, hidden_fields=HIDDEN_FROM_TENANTS)
    return run_log_search(query, config=get_config())  # a Django view: the process edge


def _log_problem(exc: InvalidAuditQuery | SearchEngineUnavailable) -> str:
    if isinstance(exc, InvalidAuditQuery):
        return "; ".join(f"log_{name}: {' '.join(errors)}" for name, errors in exc.errors.items())
    return str(exc.detail)


def job_history(job: Job) -> dict[str, object]:
    """The job's audit events, newest first (``history_error`` says why there are none when
    the search engine did not answer)."""
    rows, error = audit_rows({"job_id": str(job.job_id)}, job.tenant_id)
    return {"history": rows, "history_error": error}


def with_ms(moment) -> str:
    """A timestamp to the millisecond, UTC (Django's formats stop at the minute or print six
    digits of microseconds)."""
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@admin.register(Execution)
class ExecutionAdmin(TenantScopedAdmin):
    """Executions are written by the beat, the workers and the reaper: here they are read, never
    changed, added or deleted (the page has no Save or Delete button)."""

    change_form_template = "admin/scheduler/execution/change_form.html"
    list_display = (
        "execution_id", "job", "status", "attempt", "worker_id", "scheduled_for_ms",
        "started_at_ms", "finished_at_ms", "duration", "start_lateness_ms",
    )
    list_filter = ("status", "tenant")
    search_fields = ("execution_id", "job__job_id", "worker_id")
    fields = ("execution_id", "job", "tenant", "status", "reason", "attempt", "worker_id",
              "scheduled_for_ms", "dispatched_at_ms", "started_at_ms", "finished_at_ms",
              "duration", "start_lateness_ms", "lease_expires_at_ms", "retry_at_ms",
              "fencing_token", "exit_code", "result", "error", "traceback")
    readonly_fields = fields
    list_select_related = ("job", "tenant")
    ordering = ("-scheduled_for",)
    show_full_result_count = False

    def get_fields(self, request: HttpRequest, obj: Execution | None = None):
        if scope_of(request.user).platform:
            return self.fields
        return tuple(f for f in self.fields if f != "traceback")  # tenants see the error

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Execution | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Execution | None = None) -> bool:
        return False

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict | None = None) -> HttpResponse:
        execution = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if execution is not None:
            context.update(execution_attempts(execution))
            context.update(execution_log_lines(execution, request.GET,
                                               platform=scope_of(request.user).platform))
            context["retryable"] = (execution.status in api.RETRYABLE_BY_HAND
                                    and self.may_act(request, execution.tenant_id))
        return super().change_view(request, object_id, form_url, extra_context=context)

    def get_urls(self):
        return [
            path("<uuid:execution_id>/retry/",
                 self.admin_site.admin_view(require_POST(self.retry_view)),
                 name="scheduler_execution_retry"),
            path("<uuid:execution_id>/logs/", self.admin_site.admin_view(self.logs_view),
                 name="scheduler_execution_logs"),
            *super().get_urls(),
        ]

    def logs_view(self, request: HttpRequest, execution_id) -> JsonResponse:
        """The lines logged after ``log_cursor``, as JSON, for the page's live view."""
        execution = self.scoped_object_or_404(request, execution_id=execution_id)
        body, status = execution_log_follow(execution, request.GET,
                                            platform=scope_of(request.user).platform)
        return JsonResponse(body, status=status)

    def retry_view(self, request: HttpRequest, execution_id) -> HttpResponse:
        """The "Retry this execution" button: :func:`scheduler.api.retry_execution`."""
        execution = self.scoped_object_or_404(request, execution_id=execution_id)
        if not self.may_act(request, execution.tenant_id):
            return HttpResponse(status=403)
        try:
            attempt = api.retry_execution(execution.execution_id, tenant=execution.tenant_id,
                                          by=f"user:{request.user}")
        except SchedulerError as exc:
            self.message_user(request, f"Not retried: {exc}", messages.ERROR)
        else:
            self.message_user(request, f"Retrying: attempt {attempt} is on its way.",
                              messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:scheduler_execution_change",
                                            args=[execution.execution_id]))

    @admin.display(description="scheduled for", ordering="scheduled_for")
    def scheduled_for_ms(self, execution: Execution) -> str:
        return with_ms(execution.scheduled_for)

    @admin.display(description="dispatched (confirmed) at")
    def dispatched_at_ms(self, execution: Execution) -> str:
        return with_ms(execution.dispatched_at)

    @admin.display(description="started at", ordering="started_at")
    def started_at_ms(self, execution: Execution) -> str:
        return with_ms(execution.started_at)

    @admin.display(description="finished at", ordering="finished_at")
    def finished_at_ms(self, execution: Execution) -> str:
        return with_ms(execution.finished_at)

    @admin.display(description="lease expires at")
    def lease_expires_at_ms(self, execution: Execution) -> str:
        return with_ms(execution.lease_expires_at)

    @admin.display(description="retry at")
    def retry_at_ms(self, execution: Execution) -> str:
        return with_ms(execution.retry_at)

    @admin.display(description="duration")
    def duration(self, execution: Execution) -> str:
        ms = duration_ms(execution.started_at, execution.finished_at)
        return "" if ms is None else f"{ms} ms"

    @admin.display(description="start lateness")
    def start_lateness_ms(self, execution: Execution) -> str:
        ms = duration_ms(execution.scheduled_for, execution.started_at)
        return "" if ms is None else f"{ms} ms"


def execution_attempts(execution: Execution) -> dict[str, object]:
    """The execution's audit events (every attempt's start, end and retry, with its worker),
    oldest first, from the search engine."""
    rows, error = audit_rows({"execution_id": str(execution.execution_id)},
                             execution.tenant_id)
    return {"attempts": sorted(rows, key=lambda r: r["timestamp"]), "attempts_error": error}


from scheduler import calendar_admin  # noqa: E402, F401 -- registers the calendars' page
