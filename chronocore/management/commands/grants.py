"""``chrono grants add|list|remove --tenant SLUG [--task PATTERN] [--queue PATTERN]``: the task
grants of a tenant (:mod:`chronocore.grants`; patterns are exact names or globs)."""

from __future__ import annotations

import uuid

from django.core.management.base import BaseCommand, CommandError

from chronocore import grants
from chronocore.models import TaskGrant, Tenant


class Command(BaseCommand):
    help = "Grant, list or remove the tasks and queues a tenant may schedule."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("add", "list", "remove"))
        parser.add_argument("--tenant", required=True, help="The tenant's slug (or id).")
        parser.add_argument("--task", default=None,
                            help="A task name or glob: billing.tasks.charge, 'billing.*', '*'.")
        parser.add_argument("--queue", default=grants.EVERYTHING,
                            help="A queue name or glob (default '*': every queue).")

    def handle(self, *args, action, tenant, task, queue, **options):
        tenant_obj = (Tenant.objects.filter(slug=tenant).first()
                      or _tenant_by_id(tenant))
        if tenant_obj is None:
            raise CommandError(f"no tenant has the slug or id {tenant!r}")
        if action == "list":
            for grant in TaskGrant.objects.filter(tenant=tenant_obj):
                self.stdout.write(f"{grant.task_pattern}\t{grant.queue_pattern}\t"
                                  f"{grant.created_by or '-'}")
            return
        if not task:
            raise CommandError(f"grants {action} needs --task PATTERN")
        if action == "add":
            try:
                _, created = grants.grant(tenant_obj, task, queue, by="chrono grants")
            except grants.InvalidGrant as exc:
                raise CommandError(str(exc)) from None
            word = "granted" if created else "already granted"
            self.stdout.write(f"{word}: {task} on queue {queue} to tenant {tenant_obj.slug}")
            return
        if not grants.revoke(tenant_obj, task, queue):
            raise CommandError(f"tenant {tenant_obj.slug} has no grant of {task} on queue "
                               f"{queue}; see chrono grants list --tenant {tenant_obj.slug}")
        self.stdout.write(f"removed: {task} on queue {queue} from tenant {tenant_obj.slug}")


def _tenant_by_id(text: str) -> Tenant | None:
    try:
        return Tenant.objects.filter(tenant_id=uuid.UUID(text)).first()
    except ValueError:
        return None
