"""``@chrono_job``, ``task.schedule()`` and the job methods, ``chrono sync-jobs`` and ``chrono
import-beat``, against the real PostgreSQL and Redis."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from celery import Celery
from celery.schedules import crontab
from celery.signals import task_prerun
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduler.clock import datetime_to_ms, now_ms
from scheduler.cron import parse_cron
from scheduler.decorators import chrono_job
from scheduler.errors import (
    InvalidCronExpression,
    InvalidJob,
    JobNotFound,
    UnknownTimeZone,
)
from scheduler.misfire import MisfirePolicy, MisfireRule
from scheduler.models import Job, JobStatus
from scheduler.timers import timer_store

pytestmark = pytest.mark.django_db

MODULE = __name__

# An existing app of its own (not Chrono's, not the current app), with decorated tasks.
shop = Celery("shop", set_as_current=False)


@chrono_job(cron="*/5 * * * *", timezone="Europe/Paris", queue="shop", tenant="acme",
            misfire=MisfireRule(MisfirePolicy.FIRE_ALL, 3), jitter_ms=1_000,
            retry={"max_attempts": 4}, overlap="skip")
@shop.task(name="tests.shop.close_tills")
def close_tills() -> str:
    return "closed"


@chrono_job(cron="0 3 * * *", args=("full",), kwargs={"gzip": True})
@shop.task(name="tests.shop.nightly_export")
def nightly_export(kind: str, gzip: bool = False) -> None:
    return None


@chrono_job(queue="shop", tenant="acme")
@shop.task(name="tests.shop.send_receipt")
def send_receipt(order_id: int, email: bool = True) -> int:
    return order_id


# A Celery app with a beat schedule, as `chrono import-beat` finds it.
legacy = Celery("legacy", set_as_current=False)
legacy.conf.timezone = "America/New_York"
legacy.conf.task_routes = {"legacy.report": {"queue": "reports"}}
legacy.conf.beat_schedule = {
    "morning-report": {"task": "legacy.report", "schedule": crontab(minute=0, hour=7),
                       "args": [1, 2], "options": {"expires": 60}},
    "heartbeat": {"task": "legacy.ping", "schedule": timedelta(seconds=20),
                  "options": {"queue": "pings"}},
    "first-monday": {"task": "legacy.report",
                     "schedule": crontab(minute=0, hour=9, day_of_week=1, day_of_month="1-7")},
}
no_beat = Celery("empty", set_as_current=False)


def sync(*args: str) -> str:
    out = io.StringIO()
    call_command("sync_jobs", *args, stdout=out)
    return out.getvalue()


def import_beat(*args: str) -> str:
    out = io.StringIO()
    call_command("import_beat", *args, stdout=out)
    return out.getvalue()


def line_of(output: str, text: str) -> str:
    lines = [line for line in output.splitlines() if text in line]
    assert len(lines) == 1, output
    return lines[0]


# --------------------------------------------------------------------------------- decorator


def test_decorating_leaves_celerys_lazy_task_unevaluated_until_it_is_used():
    lazy_app = Celery("lazy", set_as_current=False)

    def report() -> None:
        return None

    report.__module__ = "tests.elsewhere"  # not one of this module's declarations
    lazy_task = lazy_app.task(name="tests.lazy.report")(report)
    decorated = chrono_job(queue="q")(lazy_task)

    assert not lazy_task.__evaluated__() and not lazy_app.finalized
    assert decorated.name == "tests.lazy.report"  # looked up on first use
    assert lazy_task.__evaluated__()


def test_the_decorated_task_is_still_the_celery_task():
    assert send_receipt.name == "tests.shop.send_receipt"
    assert send_receipt(5) == 5
    assert send_receipt.s(5).task == "tests.shop.send_receipt"
    assert close_tills.chrono.retry == {"max_attempts": 4}
    assert close_tills.chrono.overlap == "skip"


@pytest.mark.parametrize(
    ("options", "error", "says"),
    [
        ({"cron": "61 * * * *"}, InvalidCronExpression, "minute"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, UnknownTimeZone, "Mars/Olympus"),
        ({"overlap": "never"}, InvalidJob, "allow, skip, buffer_one, cancel_previous"),
        ({"misfire": "sometimes"}, InvalidJob, "fire_once, fire_all, skip"),
        ({"cron": "* * * * *", "jitter_ms": 60_000}, InvalidJob,
         "not below the 60000 ms between occurrences"),
        ({"jitter_ms": 500}, InvalidJob, "pass cron= or every= too"),
        ({"retry": [3]}, InvalidJob, "retry= takes a dict"),
        ({"cron": "* * * * *", "args": (object(),)}, InvalidJob, "JSON-serialisable"),
    ],
)
def test_a_bad_declaration_fails_when_the_module_is_imported(options, error, says):
    with pytest.raises(error) as refused:
        chrono_job(**options)
    assert says in str(refused.value)


def test_the_decorator_works_without_parentheses_as_one_time_only():
    bare_app = Celery("bare", set_as_current=False)

    def notify() -> None:
        return None

    notify.__module__ = "tests.elsewhere"
    decorated = chrono_job(bare_app.task(name="tests.bare.notify", shared=False)(notify))
    assert decorated.chrono.cron is None and decorated.cron_job_spec() is None
    assert decorated.name == "tests.bare.notify"


def test_the_decorator_refuses_what_is_not_a_celery_task():
    def plain() -> None:
        return None

    with pytest.raises(TypeError, match="put it above @app.task or @shared_task"):
        chrono_job(queue="q")(plain)
    with pytest.raises(TypeError, match="applied twice"):
        chrono_job(queue="q")(send_receipt)


def _run_prerun(task, **request: object) -> None:
    task.push_request(**request)
    try:
        task_prerun.send(sender=task, task_id="t-1", task=task, args=(), kwargs={})
    finally:
        task.pop_request()


def test_a_worker_says_when_a_task_cannot_record_the_chrono_execution_it_runs(caplog):
    from scheduler.decorators import ChronoTask

    plain_app = Celery("plain", set_as_current=False)

    def work() -> None:
        return None

    plain = plain_app.task(name="tests.plain.work", shared=False)(work)
    recording = plain_app.task(name="tests.plain.recorded", shared=False, base=ChronoTask)(work)

    _run_prerun(plain._get_current_object(), chrono_execution_id="e-1")
    _run_prerun(plain._get_current_object())  # a plain Celery call: nothing to record
    _run_prerun(recording._get_current_object(), chrono_execution_id="e-2")

    errors = [r.getMessage() for r in caplog.records if r.name == "chrono.decorators"]
    assert len(errors) == 1
    assert "tests.plain.work runs Chrono execution e-1 but cannot record it" in errors[0]
    assert "give the task base=ChronoTask" in errors[0]


# --------------------------------------------------------------------------------- schedule()


def test_schedule_creates_a_one_time_job_and_its_timer(tenant, redis_client,
                                                       django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        job_id = send_receipt.schedule(7, delay=60, email=False)

    job = Job.objects.get(job_id=job_id)
    assert (job.job_type, job.args, job.kwargs) == ("tests.shop.send_receipt", [7],
                                                    {"email": False})
    assert (job.queue, job.tenant_id, job.cron_expression) == ("shop", tenant.tenant_id, None)
    assert abs(datetime_to_ms(job.next_run_at) - (now_ms() + 60_000)) < 5_000
    assert timer_store().fire_time_of(str(job_id)) == datetime_to_ms(job.next_run_at)


def test_schedule_at_a_time_for_a_tenant_given_by_id(tenant, other_tenant, redis_client):
    at = timezone.now() + timedelta(hours=1)
    job_id = send_receipt.schedule(8, at=at, tenant=str(other_tenant.tenant_id), queue="vip")
    job = Job.objects.get(job_id=job_id)
    assert (job.tenant_id, job.queue) == (other_tenant.tenant_id, "vip")
    assert datetime_to_ms(job.next_run_at) == datetime_to_ms(at)  # Chrono keeps milliseconds


def test_scheduling_twice_with_one_idempotency_key_yields_one_job(tenant, redis_client):
    first = send_receipt.schedule(9, delay=30, idempotency_key="receipt-9")
    second = send_receipt.schedule(9, delay=30, idempotency_key="receipt-9")
    assert first == second
    assert Job.objects.filter(idempotency_key="receipt-9").count() == 1


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((), {}, "missing 1 required positional argument: 'order_id'"),
        ((1,), {"fax": True}, "unexpected keyword argument 'fax'"),
        ((object(),), {}, "JSON-serialisable"),
    ],
)
def test_schedule_refuses_arguments_the_task_cannot_take_and_writes_nothing(
    tenant, redis_client, args, kwargs, says
):
    with pytest.raises(InvalidJob) as refused:
        send_receipt.schedule(*args, delay=30, **kwargs)
    assert says in str(refused.value)
    assert not Job.objects.exists()


def test_schedule_needs_a_tenant_that_exists(tenant, redis_client):
    with pytest.raises(InvalidJob, match="no tenant: pass tenant="):
        nightly_export.schedule("x", delay=1)
    with pytest.raises(InvalidJob, match="no tenant has the slug or id 'nobody'"):
        send_receipt.schedule(1, delay=1, tenant="nobody")
    with pytest.raises(InvalidJob, match="give exactly one of delay= or at="):
        send_receipt.schedule(1)


def test_job_methods_pause_resume_trigger_and_cancel_this_tasks_job(tenant, redis_client):
    job_id = send_receipt.schedule(1, delay=3_600)

    assert send_receipt.pause_job(job_id) is True
    assert Job.objects.get(job_id=job_id).status == JobStatus.PAUSED
    assert send_receipt.resume_job(job_id) is True
    assert send_receipt.trigger_job(job_id) is True
    assert abs(datetime_to_ms(Job.objects.get(job_id=job_id).next_run_at) - now_ms()) < 5_000
    assert send_receipt.cancel_job(job_id, by="alice") is True
    job = Job.objects.get(job_id=job_id)
    assert (job.status, job.cancelled_by) == (JobStatus.CANCELLED, "alice")
    assert send_receipt.cancel_job(job_id) is False


def test_job_methods_refuse_a_job_of_another_task_or_tenant(tenant, other_tenant, redis_client):
    job_id = send_receipt.schedule(1, delay=3_600)
    with pytest.raises(JobNotFound, match="of task tests.shop.close_tills"):
        close_tills.cancel_job(job_id)
    with pytest.raises(JobNotFound):
        send_receipt.pause_job(job_id, tenant=other_tenant)
    assert Job.objects.get(job_id=job_id).status == JobStatus.ACTIVE


# --------------------------------------------------------------------------------- sync-jobs


def test_sync_jobs_creates_one_cron_job_per_declaration_then_changes_nothing(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = sync(MODULE)

    assert line_of(first, "tests.shop.close_tills").startswith("created")
    assert line_of(first, "tests.shop.nightly_export").startswith("created")
    assert line_of(first, "tests.shop.send_receipt").startswith("one-time")
    assert "3 decorated tasks: 2 created, 1 one-time" in first
    tills = Job.objects.get(idempotency_key="chrono_job:tests.shop.close_tills")
    assert (tills.cron_expression, tills.timezone, tills.queue) == ("*/5 * * * *",
                                                                   "Europe/Paris", "shop")
    assert (tills.misfire_policy, tills.misfire_fire_all_limit, tills.jitter_ms) == (
        "fire_all", 3, 1_000)
    assert (tills.tenant_id, tills.job_type) == (tenant.tenant_id, "tests.shop.close_tills")
    export = Job.objects.get(idempotency_key="chrono_job:tests.shop.nightly_export")
    assert (export.args, export.kwargs, export.queue) == (["full"], {"gzip": True}, "chrono")
    assert timer_store().fire_time_of(str(tills.job_id)) == datetime_to_ms(tills.next_run_at)

    second = sync(MODULE)
    assert line_of(second, "tests.shop.close_tills").startswith("unchanged")
    assert "3 decorated tasks: 2 unchanged, 1 one-time" in second
    assert Job.objects.count() == 2


def test_sync_jobs_brings_a_job_in_line_with_a_changed_declaration(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    sync(MODULE)
    tills = Job.objects.get(idempotency_key="chrono_job:tests.shop.close_tills")
    # As if the decorator had said cron="0 * * * *", queue="old" at the previous deploy.
    Job.objects.filter(pk=tills.pk).update(cron_expression="0 * * * *", queue="old",
                                           jitter_ms=0)

    with django_capture_on_commit_callbacks(execute=True):
        output = sync(MODULE)

    line = line_of(output, "tests.shop.close_tills")
    assert line.startswith("updated")
    assert "(changed: cron_expression, queue, jitter_ms)" in line
    assert str(tills.job_id) in line
    tills.refresh_from_db()
    assert (tills.cron_expression, tills.queue, tills.jitter_ms) == ("*/5 * * * *", "shop",
                                                                      1_000)
    period_start = parse_cron("*/5 * * * *", "Europe/Paris").next_fire_ms(now_ms() - 1_000)
    assert period_start <= datetime_to_ms(tills.next_run_at) < period_start + 301_000
    assert timer_store().fire_time_of(str(tills.job_id)) == datetime_to_ms(tills.next_run_at)
    assert Job.objects.count() == 2


def test_sync_jobs_keeps_a_paused_job_paused_and_a_cancelled_one_cancelled(tenant, redis_client):
    sync(MODULE)
    tills = Job.objects.get(idempotency_key="chrono_job:tests.shop.close_tills")
    export = Job.objects.get(idempotency_key="chrono_job:tests.shop.nightly_export")
    close_tills.pause_job(tills.job_id)
    nightly_export.cancel_job(export.job_id, tenant="acme", by="ops")

    out = io.StringIO()
    with pytest.raises(CommandError, match="1 declaration"):
        call_command("sync_jobs", MODULE, stdout=out)

    line = line_of(out.getvalue(), "tests.shop.nightly_export")
    assert line.startswith("skipped")
    assert f"its job {export.job_id} was cancelled by ops" in line
    assert "delete that job" in line
    assert Job.objects.get(pk=tills.pk).status == JobStatus.PAUSED
    assert Job.objects.get(pk=export.pk).status == JobStatus.CANCELLED
    assert Job.objects.count() == 2


def test_sync_jobs_dry_run_writes_nothing(tenant, redis_client,
                                          django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        output = sync(MODULE, "--dry-run")
    assert line_of(output, "tests.shop.close_tills").startswith("would create")
    assert not Job.objects.exists()
    assert timer_store().pending_count() == 0


def test_sync_jobs_without_a_tenant_to_use_skips_that_declaration_and_fails(
    tenant, other_tenant, redis_client
):
    out = io.StringIO()
    with pytest.raises(CommandError, match="1 declaration"):
        call_command("sync_jobs", MODULE, stdout=out)
    assert "tests.shop.nightly_export: no tenant; pass tenant= to @chrono_job or --tenant" \
        in out.getvalue()
    assert Job.objects.filter(tenant=tenant).count() == 1  # close_tills names acme

    sync(MODULE, "--tenant", "globex")
    export = Job.objects.get(idempotency_key="chrono_job:tests.shop.nightly_export")
    assert export.tenant_id == other_tenant.tenant_id


@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("no.such.module", "cannot import no.such.module"),
        ("scheduler.cron", "no @chrono_job task in scheduler.cron"),
        (f"{MODULE}:nothing", f"{MODULE} has no Celery app named nothing"),
        (f"{MODULE}:MODULE", f"{MODULE}:MODULE is a str, not a Celery app"),
    ],
)
def test_sync_jobs_names_what_it_could_not_find(tenant, module, says):
    with pytest.raises(CommandError, match=says):
        sync(module)


# --------------------------------------------------------------------------------- import-beat


def test_import_beat_imports_every_translatable_entry_once(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        first = import_beat("examples.billing.celery:app", "--tenant", "acme")

    close_day = line_of(first, "close-day -> billing.close_day")
    assert close_day.startswith("created")
    assert '"30 2 * * *" in Europe/Paris (crontab in Europe/Paris), queue billing' in close_day
    payments = line_of(first, "sync-payments -> billing.sync_payments")
    assert "every 30 seconds in UTC (every 30 s of elapsed time)" in payments
    rates = line_of(first, "refresh-rates")
    assert "every 15 minutes in UTC (every 15 min of elapsed time)" in rates
    poll = line_of(first, "poll-bank -> billing.poll_bank")
    assert poll.startswith("created") and "every 7 seconds" in poll
    assert "4 beat entries for tenant acme: 4 created" in first

    jobs = {job.idempotency_key: job for job in Job.objects.all()}
    assert set(jobs) == {"beat:billing:close-day", "beat:billing:sync-payments",
                         "beat:billing:refresh-rates", "beat:billing:poll-bank"}
    rates_job = jobs["beat:billing:refresh-rates"]
    assert (rates_job.job_type, rates_job.kwargs, rates_job.name) == (
        "billing.refresh_exchange_rates", {"currencies": ["EUR", "USD"]}, "refresh-rates")
    assert (rates_job.cron_expression, rates_job.interval_ms) == (None, 15 * 60_000)
    poll_job = jobs["beat:billing:poll-bank"]
    assert poll_job.interval_ms == 7_000
    # The first run is one period after the anchor (the creation), as under Celery beat.
    assert poll_job.next_run_at - poll_job.interval_anchor == timedelta(seconds=7)
    assert timer_store().pending_count() == 4

    second = import_beat("examples.billing.celery:app", "--tenant", "acme")
    assert "4 beat entries for tenant acme: 4 unchanged" in second
    assert Job.objects.count() == 4
    assert Job.objects.get(pk=poll_job.pk).interval_anchor == poll_job.interval_anchor


def test_import_beat_turns_an_interval_once_imported_as_cron_into_an_interval_job(
    tenant, redis_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        import_beat("examples.billing.celery:app", "--tenant", "acme")
    # What an earlier Chrono made of timedelta(minutes=15): a clock-aligned cron.
    Job.objects.filter(idempotency_key="beat:billing:refresh-rates").update(
        cron_expression="*/15 * * * *", interval_ms=None, interval_anchor=None)

    line = line_of(import_beat("examples.billing.celery:app", "--tenant", "acme"),
                   "refresh-rates")
    assert line.startswith("updated") and "cron_expression" in line and "interval_ms" in line
    job = Job.objects.get(idempotency_key="beat:billing:refresh-rates")
    assert (job.cron_expression, job.interval_ms) == (None, 15 * 60_000)
    assert job.next_run_at > timezone.now()


def test_import_beat_reads_routes_time_zone_and_reports_ignored_options(tenant, redis_client):
    output = import_beat(f"{MODULE}:legacy")  # the only tenant: no --tenant needed

    report = line_of(output, "morning-report")
    assert '"0 7 * * *" in America/New_York (crontab in America/New_York), queue reports' \
        in report
    assert "ignored options: expires (Chrono routes by queue name only)" in report
    assert "every 20 seconds in UTC" in line_of(output, "heartbeat -> legacy.ping")
    first_monday = line_of(output, "first-monday")
    assert first_monday.startswith("skipped")
    assert "both day_of_month (1-7) and day_of_week (1) are restricted" in first_monday
    job = Job.objects.get(idempotency_key="beat:legacy:morning-report")
    assert (job.args, job.queue, job.timezone) == ([1, 2], "reports", "America/New_York")
    assert Job.objects.get(idempotency_key="beat:legacy:heartbeat").queue == "pings"


def test_import_beat_updates_a_job_whose_entry_changed(tenant, redis_client):
    import_beat(f"{MODULE}:legacy")
    Job.objects.filter(idempotency_key="beat:legacy:morning-report").update(args=[9])

    line = line_of(import_beat(f"{MODULE}:legacy"), "morning-report")
    assert line.startswith("updated") and "(changed: args)" in line
    assert Job.objects.get(idempotency_key="beat:legacy:morning-report").args == [1, 2]


def test_import_beat_dry_run_writes_nothing(tenant, redis_client):
    output = import_beat("examples.billing.celery:app", "--dry-run")
    assert line_of(output, "close-day").startswith("would create")
    assert "4 would create" in output
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("app", "says"),
    [
        ("no.such.module:app", "cannot import no.such.module"),
        (f"{MODULE}:no_beat", f"{MODULE}:no_beat has no beat_schedule entries"),
        (f"{MODULE}:sync", f"{MODULE}:sync is a function, not a Celery app"),
        (MODULE, f"{MODULE} has no Celery app named app or celery"),
    ],
)
def test_import_beat_names_what_it_could_not_find(tenant, app, says):
    with pytest.raises(CommandError, match=says):
        import_beat(app)


def test_import_beat_needs_a_tenant_when_there_are_several(tenant, other_tenant):
    with pytest.raises(CommandError, match="pass --tenant SLUG"):
        import_beat(f"{MODULE}:legacy")
    with pytest.raises(CommandError, match="no tenant has the slug or id 'nobody'"):
        import_beat(f"{MODULE}:legacy", "--tenant", "nobody")
