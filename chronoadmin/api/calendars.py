"""REST endpoints of exclusion calendars: ``/api/v1/calendars/``, a tenant's named calendars of
days its jobs do not fire on (:mod:`scheduler.calendars`). A calendar is addressed by its name,
unique per tenant; another tenant's name is a 404, as an unknown one is. Bodies are checked by
the pure rules (a 400 naming each field: ``timezone``, ``dates[2]``, ``rules[0]`` …) and written
by :mod:`scheduler.calendar_store`, which refuses (409, counting the jobs) to delete or rename a
calendar jobs name. No business rule lives here.
"""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from chronoadmin.api.views import TenantViewSet
from scheduler import calendar_store
from scheduler.calendars import MAX_ENTRIES
from scheduler.models import Calendar


class CalendarSerializer(serializers.ModelSerializer):
    """A calendar as the API returns it (and, but for its read-only fields, takes it)."""

    name = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,99}$",
        help_text="Unique per tenant; jobs name the calendar by it (their 'calendars').")
    timezone = serializers.CharField(
        max_length=64, required=False,
        help_text="IANA time zone whose local days the calendar excludes (default UTC).")
    description = serializers.CharField(required=False, allow_blank=True, max_length=1000)
    dates = serializers.ListField(
        child=serializers.DateField(), required=False, max_length=MAX_ENTRIES,
        help_text="Days excluded, YYYY-MM-DD.")
    ranges = serializers.ListField(
        child=serializers.CharField(), required=False, max_length=MAX_ENTRIES,
        help_text="Ranges of days excluded, START/END both included: '2026-12-24/2027-01-02'.")
    rules = serializers.ListField(
        child=serializers.CharField(), required=False, max_length=MAX_ENTRIES,
        help_text="Cron day fields 'day-of-month month day-of-week' (Chrono's cron syntax, "
        "L, W and # included, not H): '* * SAT,SUN', '25 DEC *', '* * 5L'.")

    class Meta:
        model = Calendar
        fields = ("calendar_id", "name", "timezone", "description", "dates", "ranges", "rules",
                  "created_at", "updated_at")
        read_only_fields = ("calendar_id", "created_at", "updated_at")


class CalendarDetailSerializer(CalendarSerializer):
    jobs = serializers.SerializerMethodField(help_text="How many of the tenant's jobs name it.")

    class Meta(CalendarSerializer.Meta):
        fields = (*CalendarSerializer.Meta.fields, "jobs")

    def get_jobs(self, calendar: Calendar) -> int:
        return calendar_store.jobs_using(calendar.tenant_id, calendar.name)


class CalendarFilter(django_filters.FilterSet):
    name = django_filters.CharFilter()
    timezone = django_filters.CharFilter()

    class Meta:
        model = Calendar
        fields: list[str] = []


@extend_schema(tags=["calendars"])
class CalendarViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Exclusion calendars of the caller's tenant."""

    queryset = Calendar.objects.none()  # the model, for the schema; get_queryset scopes it
    serializer_class = CalendarSerializer
    filterset_class = CalendarFilter
    ordering_fields = ("created_at", "updated_at")
    lookup_field = "name"

    def get_queryset(self) -> QuerySet[Calendar]:
        return Calendar.objects.for_tenant(self.tenant)

    def get_serializer_class(self):
        return CalendarSerializer if self.action == "list" else CalendarDetailSerializer

    @extend_schema(request=CalendarSerializer, responses={201: CalendarDetailSerializer})
    def create(self, request: Request) -> Response:
        calendar = calendar_store.create(self.tenant.tenant_id, request.data)
        return Response(CalendarDetailSerializer(calendar).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=CalendarSerializer, responses={200: CalendarDetailSerializer})
    def partial_update(self, request: Request, name: str) -> Response:
        """Change any of its fields; a list given replaces the calendar's list. Its jobs see
        the new days from their next occurrence."""
        calendar = calendar_store.update(self.get_object(), request.data)
        return Response(CalendarDetailSerializer(calendar).data)

    @extend_schema(responses={204: None, 409: OpenApiResponse(
        response=OpenApiTypes.OBJECT,
        description="Jobs name this calendar (the message counts them); take it out of "
        "their calendars first.")})
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a calendar no job names (409 counting the jobs that do)."""
        calendar_store.delete(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
