"""Which tenants a signed-in admin user acts for, and what they may do there.

Two kinds of staff use the admin (and the dashboard and audit pages mounted beside it):

* **platform staff** — superusers, and users holding the ``chronocore.platform_staff``
  permission — see every tenant, with the tenant filter; what they may change is Django's usual
  model permissions (a superuser has them all). Only they reach the staff REST API
  (:class:`chronocore.rest.permissions.IsPlatformAdmin`);
* **tenant staff** — users with a :class:`chronocore.models.TenantMembership` — see the rows of
  their tenants only, whatever the URL says: another tenant's object id answers 404, as one that
  does not exist. Their role in each tenant (viewer, operator, admin) decides what they may do
  there; they need no model permissions.

A staff user who is neither sees no tenant's rows: access is granted, never assumed, so a user
whose last membership was removed is not promoted to the whole platform.

:class:`TenantScopedAdmin` is the ModelAdmin base every Chrono admin page of a tenant's rows
uses. The scope is read once per request (one indexed query) and kept on the user object.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest

from chronocore.models import STAFF_ROLE_RANK, StaffRole, Tenant, TenantMembership

PLATFORM_PERMISSION = "chronocore.platform_staff"
_CACHE_ATTRIBUTE = "_chrono_staff_scope"


@dataclass(frozen=True)
class StaffScope:
    """What one user may see and do: every tenant (``platform``), or the tenants of ``roles``
    (tenant id → role)."""

    platform: bool
    roles: Mapping[uuid.UUID, str] = field(default_factory=dict)

    @property
    def tenant_ids(self) -> frozenset[uuid.UUID]:
        return frozenset(self.roles)

    @property
    def sees_anything(self) -> bool:
        return self.platform or bool(self.roles)

    def sees(self, tenant_id: uuid.UUID | str | None) -> bool:
        return self.platform or _as_uuid(tenant_id) in self.roles

    def has_role(self, tenant_id: uuid.UUID | str | None, role: str) -> bool:
        """True when the user holds ``role`` (or a higher one) in the tenant; platform staff
        hold every role everywhere (their model permissions still apply in the admin)."""
        if self.platform:
            return True
        held = self.roles.get(_as_uuid(tenant_id))
        return held is not None and STAFF_ROLE_RANK[held] >= STAFF_ROLE_RANK[role]

    def tenants_with(self, role: str) -> frozenset[uuid.UUID]:
        """The tenant staff's tenants where they hold ``role`` (empty for platform staff, who
        are never filtered)."""
        return frozenset(t for t, held in self.roles.items()
                         if STAFF_ROLE_RANK[held] >= STAFF_ROLE_RANK[role])

    def filter(self, queryset: QuerySet, column: str = "tenant_id",
               role: str = StaffRole.VIEWER) -> QuerySet:
        """``queryset`` narrowed to the rows of tenants where the user holds ``role``
        (unchanged for platform staff)."""
        if self.platform:
            return queryset
        return queryset.filter(Q(**{f"{column}__in": list(self.tenants_with(role))}))

    def tenants(self) -> QuerySet:
        """The tenants the user sees, by slug."""
        return self.filter(Tenant.objects.order_by("slug"), "tenant_id")


def _as_uuid(value: uuid.UUID | str | None) -> uuid.UUID | None:
    if value is None or isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


def is_platform_staff(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff and (
        user.is_superuser or user.has_perm(PLATFORM_PERMISSION)))


def scope_of(user) -> StaffScope:
    """The user's scope, computed once per user object (that is, per request)."""
    cached = getattr(user, _CACHE_ATTRIBUTE, None)
    if cached is not None:
        return cached
    if is_platform_staff(user):
        scope = StaffScope(platform=True)
    elif user is not None and user.is_authenticated and user.is_active and user.is_staff:
        scope = StaffScope(platform=False, roles=dict(
            TenantMembership.objects.filter(user=user).values_list("tenant_id", "role")))
    else:
        scope = StaffScope(platform=False)
    setattr(user, _CACHE_ATTRIBUTE, scope)
    return scope


def forget_scope(user) -> None:
    """Drop the scope kept on ``user`` (after changing its memberships in the same request)."""
    if hasattr(user, _CACHE_ATTRIBUTE):
        delattr(user, _CACHE_ATTRIBUTE)


def add_member(user, tenant: Tenant, role: str, *, by: str = "") -> tuple[TenantMembership, bool]:
    """Make ``user`` staff of ``tenant`` with ``role`` (changing the role of a member); the user
    becomes ``is_staff`` so that they can sign in to the admin. ``(membership, created)``."""
    if role not in StaffRole.values:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(StaffRole.values)}")
    membership, created = TenantMembership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": role},
        create_defaults={"role": role, "created_by": by})
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    forget_scope(user)
    return membership, created


class TenantScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin of rows that belong to a tenant (``tenant_column`` names the column).

    For tenant staff: the list, the filters, the search and every object page hold their
    tenants' rows only, and an id of another tenant's row answers 404 (for everyone, an id of no
    row does: Django's admin would redirect to the index); viewing needs the viewer role,
    changing and deleting :attr:`tenant_change_role`, adding :attr:`tenant_add_role` (None:
    tenant staff add nothing here). Platform staff see every row and the tenant filter, with
    Django's model permissions."""

    tenant_column = "tenant_id"
    tenant_change_role: str | None = StaffRole.OPERATOR
    tenant_add_role: str | None = None

    # -- rows ---------------------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return scope_of(request.user).filter(super().get_queryset(request), self.tenant_column)

    def scoped_object_or_404(self, request: HttpRequest, **lookup: object):
        """The row matching ``lookup`` among those the user sees; 404 otherwise (another
        tenant's row and no row look the same)."""
        try:
            return self.get_queryset(request).get(**lookup)
        except (self.model.DoesNotExist, ValueError, ValidationError):
            raise Http404(f"No {self.opts.verbose_name} matches the given query.") from None

    def acting_rows(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        """Of ``queryset``, the rows the user may change (their tenants where their role is
        :attr:`tenant_change_role`; all for platform staff)."""
        scope = scope_of(request.user)
        if scope.platform:
            return queryset
        if self.tenant_change_role is None:
            return queryset.none()
        return scope.filter(queryset, self.tenant_column, self.tenant_change_role)

    def _get_obj_does_not_exist_redirect(self, request, opts, object_id):
        # Django redirects an id it cannot find to the admin's index; for another tenant's id
        # that tells its staff nothing the URL did not, but a 404 is what every other way in
        # (the REST API, the custom views here) answers.
        raise Http404(f"No {opts.verbose_name} with the id {str(object_id)[:64]!r}.")

    def get_list_filter(self, request: HttpRequest):
        filters = super().get_list_filter(request)
        if scope_of(request.user).platform:
            return filters
        # A tenant filter lists every tenant's slug; tenant staff need none.
        return tuple(f for f in filters if f != "tenant")

    # -- permissions --------------------------------------------------------------------------

    def _tenant_of(self, obj) -> uuid.UUID | None:
        return None if obj is None else getattr(obj, self.tenant_column)

    def _tenant_staff_may(self, request: HttpRequest, role: str | None, obj=None) -> bool:
        scope = scope_of(request.user)
        if role is None:
            return False
        if obj is None:
            return bool(scope.tenants_with(role))
        return scope.has_role(self._tenant_of(obj), role)

    def has_module_permission(self, request: HttpRequest) -> bool:
        scope = scope_of(request.user)
        return super().has_module_permission(request) if scope.platform else bool(scope.roles)

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        if scope_of(request.user).platform:
            return super().has_view_permission(request, obj)
        return self._tenant_staff_may(request, StaffRole.VIEWER, obj)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        if scope_of(request.user).platform:
            return super().has_change_permission(request, obj)
        return self._tenant_staff_may(request, self.tenant_change_role, obj)

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        if scope_of(request.user).platform:
            return super().has_delete_permission(request, obj)
        return self._tenant_staff_may(request, self.tenant_change_role, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        if scope_of(request.user).platform:
            return super().has_add_permission(request)
        return self._tenant_staff_may(request, self.tenant_add_role)

    def may_act(self, request: HttpRequest, tenant_id: uuid.UUID | str) -> bool:
        """May the user act (pause, retry, cancel, …) on a row of ``tenant_id``? Platform staff
        may where they may change the model; tenant staff with the change role there."""
        scope = scope_of(request.user)
        if scope.platform:
            return super().has_change_permission(request)
        return self.tenant_change_role is not None and scope.has_role(
            tenant_id, self.tenant_change_role)

    # -- creating rows ------------------------------------------------------------------------

    def tenants_to_add_for(self, request: HttpRequest) -> QuerySet:
        """The tenants the user may add rows for here."""
        scope = scope_of(request.user)
        if scope.platform:
            return Tenant.objects.order_by("slug")
        role = self.tenant_add_role
        ids: Iterable[uuid.UUID] = scope.tenants_with(role) if role else ()
        return Tenant.objects.filter(tenant_id__in=list(ids)).order_by("slug")

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "tenant" and not scope_of(request.user).platform:
            # A crafted POST naming another tenant fails the form's choice validation.
            kwargs["queryset"] = self.tenants_to_add_for(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request, obj, form, change):
        if not change and not scope_of(request.user).platform:
            allowed = set(self.tenants_to_add_for(request).values_list("tenant_id", flat=True))
            if getattr(obj, self.tenant_column, None) is None and len(allowed) == 1:
                setattr(obj, self.tenant_column, next(iter(allowed)))  # pinned: their tenant
            if getattr(obj, self.tenant_column) not in allowed:
                raise PermissionDenied("Not a tenant you may add to.")
        super().save_model(request, obj, form, change)
