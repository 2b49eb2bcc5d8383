"""The admin page of exclusion calendars, scoped by tenant like every page of a tenant's rows
(:class:`chronocore.staff.TenantScopedAdmin`): a tenant's staff see their tenant's calendars
only (another tenant's id answers 404) and, as operators, add, change and delete them.

The form is checked by the rules of the REST API (:mod:`scheduler.calendars` for the days,
:func:`scheduler.calendar_store.checked_change` for a change: a new name while jobs name the
calendar, or days that leave one of its jobs no occurrence, are refused on the field at
fault); a calendar jobs name is not deleted (the page lists why, counting the jobs).
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpRequest

from chronocore.models import StaffRole
from chronocore.staff import TenantScopedAdmin
from scheduler import calendar_store
from scheduler.calendars import parse_calendar
from scheduler.errors import CalendarInUse, SpecInvalid
from scheduler.models import Calendar
from search import audit

_DOCUMENT_FIELDS = ("name", "timezone", "description", "dates", "ranges", "rules")


class CalendarForm(forms.ModelForm):
    class Meta:
        model = Calendar
        fields = ("tenant", *_DOCUMENT_FIELDS)

    def clean(self) -> dict:
        cleaned = super().clean()
        if self.errors:  # a field Django could not read (not JSON): said on that field
            return cleaned
        document = {key: cleaned[key] for key in _DOCUMENT_FIELDS if key in cleaned}
        for key in ("dates", "ranges", "rules"):
            if document.get(key) is None:
                document[key] = []
        try:
            if self.instance.pk is None:
                calendar = parse_calendar(document)
            else:  # the row as it is: the form's instance is updated after clean()
                calendar, _ = calendar_store.checked_change(self.instance, document)
        except SpecInvalid as exc:
            for field, messages in exc.errors.items():
                base = field.partition("[")[0]
                target = base if base in self.fields else None
                for message in messages:
                    self.add_error(target, message if field == base else f"{field}: {message}")
            return cleaned
        except CalendarInUse as exc:
            self.add_error("name", exc.message)
            return cleaned
        cleaned.update(calendar_store.columns_of(calendar))
        return cleaned


@admin.register(Calendar)
class CalendarAdmin(TenantScopedAdmin):
    form = CalendarForm
    list_display = ("name", "tenant", "timezone", "description", "updated_at")
    list_filter = ("tenant", "timezone")
    search_fields = ("name", "description")
    list_select_related = ("tenant",)
    tenant_add_role = StaffRole.OPERATOR

    def get_readonly_fields(self, request: HttpRequest, obj: Calendar | None = None):
        # A calendar stays its tenant's: jobs of that tenant name it.
        return ("tenant",) if obj is not None else ()

    def save_model(self, request: HttpRequest, obj: Calendar, form, change: bool) -> None:
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            calendar_store.record(audit.CALENDAR_CHANGED if change else audit.CALENDAR_CREATED,
                                  obj, by=f"user:{request.user}")

    def delete_model(self, request: HttpRequest, obj: Calendar) -> None:
        # Checked again under the row's lock (a job may have named it since the page showed).
        try:
            calendar_store.delete(obj, by=f"user:{request.user}")
        except CalendarInUse as exc:
            self.message_user(request, exc.message, messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for calendar in self.acting_rows(request, queryset):
            self.delete_model(request, calendar)

    def get_deleted_objects(self, objs, request: HttpRequest):
        to_delete, model_count, perms_needed, protected = super().get_deleted_objects(
            objs, request)
        for calendar in objs:
            if count := calendar_store.jobs_using(calendar.tenant_id, calendar.name):
                protected.append(f"{count} job(s) name the calendar '{calendar.name}': remove "
                                 "it from their calendars first")
        return to_delete, model_count, perms_needed, protected
