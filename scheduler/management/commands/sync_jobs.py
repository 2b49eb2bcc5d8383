"""``chrono sync-jobs MODULE[:APP] … [--tenant SLUG] [--dry-run]``: one Chrono cron job per task
declared with ``@chrono_job(cron=…)``, created or brought up to date. Run it after each deploy;
a second run changes nothing.

Every decorated task synced (one-time ones included) is granted, on its queue, to its tenant
(:mod:`chronocore.grants`): the platform's operator runs this command, so declaring a task in
code and syncing it is how a team is granted its own tasks."""

from __future__ import annotations

from contextlib import nullcontext

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

# get_config() here: a command is the process edge (the default queue of a task that names none).
from chronocore.config import get_config
from chronocore.grants import InvalidGrant, ensure_granted
from scheduler.app_loading import AppNotFound, import_task_modules
from scheduler.declared_jobs import SyncOutcome, default_tenant, resolve_tenant, sync_cron_job
from scheduler.decorators import declared_tasks
from scheduler.errors import SchedulerError
from scheduler.intervals import describe_period

DRY_RUN_WORDS = {SyncOutcome.CREATED: "would create", SyncOutcome.UPDATED: "would update"}


class Command(BaseCommand):
    help = "Create or update one Chrono cron job per @chrono_job(cron=...) task."

    def add_arguments(self, parser):
        parser.add_argument(
            "modules", nargs="+", metavar="MODULE[:APP]",
            help="A module (or package) whose decorated tasks to sync, e.g. "
                 "examples.billing.tasks; or MODULE:APP for every decorated task in the modules "
                 "that app's worker imports (its imports, include and autodiscovered modules).",
        )
        parser.add_argument("--tenant", default=None,
                            help="Slug or id of the tenant of tasks whose decorator names none.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Show what would change; write nothing.")

    def handle(self, *args, modules, tenant, dry_run, **options):
        tasks = {}
        for spec in modules:
            try:
                import_task_modules(spec)
            except AppNotFound as exc:
                raise CommandError(str(exc)) from None
            except SchedulerError as exc:  # a @chrono_job with bad options, raised at import
                raise CommandError(f"importing {spec}: {exc}") from None
            # A module selects its own tasks; an app, every task its modules declared.
            selected = declared_tasks(None if ":" in spec else spec)
            tasks.update((task.name, task) for task in selected)
        try:
            fallback_tenant = default_tenant(tenant)
        except SchedulerError as exc:
            raise CommandError(str(exc)) from None
        if not tasks:
            raise CommandError(f"no @chrono_job task in {', '.join(modules)}")
        counts: dict[str, int] = {}
        with transaction.atomic() if dry_run else nullcontext():
            for name, task in tasks.items():
                word = self._sync(name, task, fallback_tenant, dry_run)
                counts[word] = counts.get(word, 0) + 1
            if dry_run:
                transaction.set_rollback(True)
        summary = ", ".join(f"{count} {word}" for word, count in counts.items())
        self.stdout.write(f"{len(tasks)} decorated tasks: {summary}")
        if counts.get("skipped"):
            raise CommandError(f"{counts['skipped']} declaration(s) not synced; see above")

    def _sync(self, name, task, fallback_tenant, dry_run) -> str:
        try:
            spec = task.cron_job_spec()
            ref = task.chrono.tenant
            tenant = resolve_tenant(ref) if ref is not None else fallback_tenant
            if spec is None and tenant is None:
                self.stdout.write(f"{'one-time':<12} {name}: no cron; schedule() creates its "
                                  "jobs (not granted: no tenant, pass --tenant SLUG)")
                return "one-time"
            if tenant is None:
                raise CommandError(
                    f"{name}: no tenant; pass tenant= to @chrono_job or --tenant SLUG "
                    "(required when there is not exactly one tenant)"
                )
            self._grant(name, task.chrono.queue or get_config().default_queue, tenant)
            if spec is None:
                self.stdout.write(f"{'one-time':<12} {name}: no cron; schedule() creates its jobs")
                return "one-time"
            result = sync_cron_job(spec, tenant=tenant, by="chrono sync-jobs")
        except (SchedulerError, InvalidGrant) as exc:
            self.stdout.write(f"{'skipped':<12} {name}: {exc}")
            return "skipped"
        except CommandError as exc:
            self.stdout.write(f"{'skipped':<12} {exc}")
            return "skipped"
        job = result.job
        word = DRY_RUN_WORDS.get(result.outcome, result.outcome.value) if dry_run else \
            result.outcome.value
        when = (f"\"{job.cron_expression}\"" if job.cron_expression else
                f"every {describe_period(job.interval_ms)}")
        line = (f"{word:<12} {name}: {when} in {job.timezone}, "
                f"queue {job.queue}, tenant {tenant.slug}")
        if not (dry_run and result.outcome is SyncOutcome.CREATED):
            line += f", job {job.job_id}"
        if result.changed:
            line += f" (changed: {', '.join(result.changed)})"
        self.stdout.write(line)
        return word

    def _grant(self, task_name: str, queue: str, tenant) -> None:
        if ensure_granted(tenant, task_name, queue, by="chrono sync-jobs"):
            self.stdout.write(f"{'granted':<12} {task_name} on queue {queue} to tenant "
                              f"{tenant.slug}")
