"""Query filters of the list endpoints (django-filter), strict ordering and strict parameters.

A misspelt parameter (``?stauts=ACTIVE``) would otherwise be ignored and list everything, so
unknown query parameters and unknown orderings are refused with 400 naming the allowed ones.
"""

from __future__ import annotations

from datetime import UTC

import django_filters
from django import forms
from django.db.models import QuerySet
from django_filters.fields import IsoDateTimeField
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.filters import OrderingFilter
from rest_framework.request import Request

from chronoadmin.api.pagination import PAGE_SIZE_PARAM
from chronocore.models import TaskGrant
from scheduler.models import Execution, ExecutionStatus, Job, JobStatus

ORDERING_PARAM = "ordering"
CURSOR_PARAM = "cursor"
# Formats the browsable API and docs add to a URL; not filters.
_PRESENTATION_PARAMS = frozenset({"format"})


class UtcIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 date-time, turned into UTC here: PostgreSQL refuses offsets past 15:59 that
    Python accepts, and a date at the edge of the calendar may not exist in UTC."""

    def to_python(self, value):
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise forms.ValidationError(
                "Enter a date/time between years 1 and 9999.", code="invalid"
            ) from None


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UtcIsoDateTimeField


class JobFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=JobStatus.choices)
    job_type = django_filters.CharFilter()
    queue = django_filters.CharFilter()
    name = django_filters.CharFilter()
    next_run_at_after = UtcDateTimeFilter(
        field_name="next_run_at", lookup_expr="gte", label="next_run_at at or after (ISO 8601)"
    )
    next_run_at_before = UtcDateTimeFilter(
        field_name="next_run_at", lookup_expr="lt", label="next_run_at before (ISO 8601)"
    )
    created_after = UtcDateTimeFilter(
        field_name="created_at", lookup_expr="gte", label="created at or after (ISO 8601)"
    )
    created_before = UtcDateTimeFilter(
        field_name="created_at", lookup_expr="lt", label="created before (ISO 8601)"
    )

    class Meta:
        model = Job
        fields: list[str] = []


class ExecutionFilter(django_filters.FilterSet):
    job = django_filters.UUIDFilter(field_name="job_id")
    status = django_filters.ChoiceFilter(choices=ExecutionStatus.choices)
    worker = django_filters.CharFilter(field_name="worker_id")
    started_after = UtcDateTimeFilter(
        field_name="started_at", lookup_expr="gte", label="started at or after (ISO 8601)"
    )
    started_before = UtcDateTimeFilter(
        field_name="started_at", lookup_expr="lt", label="started before (ISO 8601)"
    )
    scheduled_after = UtcDateTimeFilter(
        field_name="scheduled_for", lookup_expr="gte", label="scheduled at or after (ISO 8601)"
    )
    scheduled_before = UtcDateTimeFilter(
        field_name="scheduled_for", lookup_expr="lt", label="scheduled before (ISO 8601)"
    )

    class Meta:
        model = Execution
        fields: list[str] = []


class TaskGrantFilter(django_filters.FilterSet):
    tenant = django_filters.UUIDFilter(field_name="tenant_id", help_text="A tenant's id.")
    tenant_slug = django_filters.CharFilter(field_name="tenant__slug",
                                            help_text="A tenant's slug.")

    class Meta:
        model = TaskGrant
        fields: list[str] = []


class StrictFilterBackend(DjangoFilterBackend):
    """django-filter, refusing query parameters that no filter, ordering or page knows."""

    def filter_queryset(self, request: Request, queryset: QuerySet, view) -> QuerySet:
        filterset_class = self.get_filterset_class(view, queryset)
        known = set(_PRESENTATION_PARAMS)
        if filterset_class is not None:
            known |= set(filterset_class.base_filters)
        if getattr(view, "ordering_fields", None):
            known.add(ORDERING_PARAM)
        if getattr(view, "pagination_class", None) is not None and view.action == "list":
            known |= {CURSOR_PARAM, PAGE_SIZE_PARAM}
        unknown = sorted(set(request.query_params) - known)
        if unknown:
            allowed = ", ".join(sorted(known - _PRESENTATION_PARAMS)) or "none"
            raise ValidationError(
                {name: [f"Unknown query parameter; allowed: {allowed}."] for name in unknown}
            )
        return super().filter_queryset(request, queryset, view)


class StrictOrderingFilter(OrderingFilter):
    """One ordering field from ``view.ordering_fields`` (a timestamp), ``-`` for descending; the
    primary key breaks ties so cursor pages never skip or repeat rows."""

    ordering_param = ORDERING_PARAM

    def get_ordering(self, request: Request, queryset: QuerySet, view) -> tuple[str, ...]:
        raw = request.query_params.get(self.ordering_param)
        if raw is None:
            return tuple(view.ordering)
        allowed = list(view.ordering_fields)
        field = raw.strip()
        if field.lstrip("-") not in allowed:
            choices = ", ".join(f"{name}, -{name}" for name in allowed)
            raise ValidationError({self.ordering_param: [
                f"'{raw[:64]}' is not an ordering; use one of {choices}."
            ]})
        return (field, "-pk" if field.startswith("-") else "pk")

    def get_schema_operation_parameters(self, view) -> list[dict]:
        choices = [name for field in view.ordering_fields for name in (field, f"-{field}")]
        return [{
            "name": self.ordering_param,
            "required": False,
            "in": "query",
            "description": f"Sort by one field; '-' for descending (default {view.ordering[0]}).",
            "schema": {"type": "string", "enum": choices},
        }]
