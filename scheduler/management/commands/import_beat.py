"""``chrono import-beat MODULE:APP [--tenant SLUG] [--dry-run]``: a Celery app's ``beat_schedule``
as Chrono cron jobs, one per entry, idempotently (running it twice creates nothing new). Prints
one line per entry: created, updated, unchanged, or skipped with why and what to change.

An entry's job is found again by the key ``beat:<app name>:<entry name>``; see
:mod:`scheduler.beat_import` for how schedules translate.
"""

from __future__ import annotations

from contextlib import nullcontext

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from chronocore.grants import InvalidGrant, ensure_granted
from chronocore.progress import progress_bar
from scheduler.app_loading import AppNotFound, load_celery_app, routed_queue
from scheduler.beat_import import translate_entry
from scheduler.cron import validate_timezone
from scheduler.declared_jobs import (
    CronJobSpec,
    SyncOutcome,
    default_tenant,
    idempotency_key,
    sync_cron_job,
)
from scheduler.errors import SchedulerError
from scheduler.intervals import describe_period

DRY_RUN_WORDS = {SyncOutcome.CREATED: "would create", SyncOutcome.UPDATED: "would update"}


class Command(BaseCommand):
    help = "Turn a Celery app's beat_schedule into Chrono cron jobs (idempotent)."

    def add_arguments(self, parser):
        parser.add_argument("app", metavar="MODULE:APP",
                            help="The Celery app whose beat_schedule to import "
                                 "(examples.billing.celery:app).")
        parser.add_argument("--tenant", default=None,
                            help="Slug or id of the tenant the jobs belong to (may be left out "
                                 "when there is exactly one tenant).")
        parser.add_argument("--dry-run", action="store_true",
                            help="Show what would change; write nothing.")
        parser.add_argument("--no-progress", action="store_false", dest="progress",
                            help="draw no progress bar (none is drawn off a terminal anyway)")

    def handle(self, *args, app, tenant, dry_run, progress=True, **options):
        try:
            celery_app = load_celery_app(app)
            tenant_obj = default_tenant(tenant)
        except (AppNotFound, SchedulerError) as exc:
            raise CommandError(str(exc)) from None
        if tenant_obj is None:
            raise CommandError("pass --tenant SLUG: there is not exactly one tenant")
        entries = dict(celery_app.conf.beat_schedule or {})
        if not entries:
            raise CommandError(f"{app} has no beat_schedule entries; nothing to import")
        app_timezone = str(celery_app.conf.timezone or "UTC")
        try:
            validate_timezone(app_timezone)
        except SchedulerError as exc:
            raise CommandError(f"{app}: app.conf.timezone: {exc}") from None
        prefix = f"beat:{celery_app.main or app}"
        counts: dict[str, int] = {}
        with transaction.atomic() if dry_run else nullcontext(), progress_bar(
                "beat entries", total=len(entries), enabled=progress) as advance:
            for name, entry in entries.items():
                word = self._import(celery_app, prefix, name, entry, app_timezone, tenant_obj,
                                    dry_run)
                counts[word] = counts.get(word, 0) + 1
                advance(1)
            if dry_run:
                transaction.set_rollback(True)
        summary = ", ".join(f"{count} {word}" for word, count in counts.items())
        self.stdout.write(f"{len(entries)} beat entries for tenant {tenant_obj.slug}: {summary}")

    def _import(self, celery_app, prefix, name, entry, app_timezone, tenant, dry_run) -> str:
        task_name = entry.get("task", "?") if isinstance(entry, dict) else "?"
        label = f"{name} -> {task_name}"
        try:
            translated = translate_entry(
                name, entry, app_timezone=app_timezone,
                routed_queue=routed_queue(celery_app, task_name),
            )
            spec = CronJobSpec(
                idempotency_key=idempotency_key(prefix, name),
                task_name=translated.task_name,
                cron=translated.cron,
                interval_ms=translated.interval_ms,
                timezone=translated.timezone,
                queue=translated.queue,
                args=translated.args,
                kwargs=translated.kwargs,
                name=name,
            )
            queue = spec.job_fields()["queue"]
            if ensure_granted(tenant, spec.task_name, queue, by="chrono import-beat"):
                self.stdout.write(f"{'granted':<12} {spec.task_name} on queue {queue} to "
                                  f"tenant {tenant.slug}")
            result = sync_cron_job(spec, tenant=tenant, by="chrono import-beat")
        except (SchedulerError, InvalidGrant) as exc:
            self.stdout.write(f"{'skipped':<12} {label}: {exc}")
            return "skipped"
        job = result.job
        word = result.outcome.value
        if dry_run:
            word = DRY_RUN_WORDS.get(result.outcome, word)
        when = (f"\"{job.cron_expression}\"" if job.cron_expression else
                f"every {describe_period(job.interval_ms)}")
        line = (f"{word:<12} {label}: {when} in {job.timezone} "
                f"({translated.note}), queue {job.queue}")
        if not (dry_run and result.outcome is SyncOutcome.CREATED):
            line += f", job {job.job_id}"
        if result.changed:
            line += f" (changed: {', '.join(result.changed)})"
        if translated.ignored_options:
            line += (f"; ignored options: {', '.join(translated.ignored_options)} "
                     "(Chrono routes by queue name only)")
        self.stdout.write(line)
        return word
