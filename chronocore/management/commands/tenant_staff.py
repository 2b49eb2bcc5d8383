"""``chrono tenant-staff add|remove|list``: which admin users work for a tenant, with which role
(:class:`chronocore.models.TenantMembership`, :mod:`chronocore.staff`)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from chronocore.management.commands.grants import _tenant_by_id
from chronocore.models import StaffRole, Tenant, TenantMembership
from chronocore.staff import add_member


class Command(BaseCommand):
    help = "Add, remove or list the admin users who work for a tenant, and their roles."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("add", "remove", "list"))
        parser.add_argument("--tenant", required=True, help="The tenant's slug (or id).")
        parser.add_argument("--user", default=None, help="The user's username.")
        parser.add_argument("--role", default=StaffRole.VIEWER, choices=StaffRole.values,
                            help="viewer (reads), operator (and acts on jobs, executions and "
                                 "runs), admin (and issues the tenant's API keys); default "
                                 "viewer.")
        parser.add_argument("--create", action="store_true",
                            help="Create the user when there is none (without a password: set "
                                 "one with `chrono changepassword USER`).")
        parser.add_argument("--email", default="", help="The new user's e-mail (with --create).")

    def handle(self, *args, action, tenant, user, role, create, email, **options):
        tenant_obj = Tenant.objects.filter(slug=tenant).first() or _tenant_by_id(tenant)
        if tenant_obj is None:
            raise CommandError(f"no tenant has the slug or id {tenant!r}")
        if action == "list":
            for membership in (TenantMembership.objects.filter(tenant=tenant_obj)
                               .select_related("user").order_by("user__username")):
                self.stdout.write(f"{membership.user.get_username()}\t{membership.role}\t"
                                  f"{membership.created_by or '-'}")
            return
        if not user:
            raise CommandError(f"tenant-staff {action} needs --user USERNAME")
        user_obj = self._user(user, create=create and action == "add", email=email)
        if action == "add":
            if user_obj.is_superuser:
                self.stderr.write(f"note: {user} is a superuser and sees every tenant anyway")
            _, created = add_member(user_obj, tenant_obj, role, by="chrono tenant-staff")
            word = "added" if created else "now"
            self.stdout.write(f"{word}: {user} is {role} of tenant {tenant_obj.slug}")
            return
        deleted, _ = TenantMembership.objects.filter(user=user_obj, tenant=tenant_obj).delete()
        if not deleted:
            raise CommandError(f"{user} is not staff of tenant {tenant_obj.slug}; see chrono "
                               f"tenant-staff list --tenant {tenant_obj.slug}")
        self.stdout.write(f"removed: {user} from tenant {tenant_obj.slug}")

    def _user(self, username: str, *, create: bool, email: str):
        users = get_user_model()
        found = users.objects.filter(**{users.USERNAME_FIELD: username}).first()
        if found is not None:
            return found
        if not create:
            raise CommandError(f"no user {username!r}; add --create to create one")
        created = users.objects.create_user(username, email=email or None, password=None)
        self.stdout.write(f"created user {username} (no password yet: chrono changepassword "
                          f"{username})")
        return created
