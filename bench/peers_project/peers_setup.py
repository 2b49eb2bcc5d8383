"""Writing a peer's schedule, and the chart: ``python peers_setup.py COMMAND ARGS``.

* ``migrate``: django-celery-beat's tables in ``chrono_peers``;
* ``dcb-cron N``: N periodic tasks every minute (one crontab ``* * * * *``);
* ``dcb-once M START_MS``: M one-off clocked tasks due evenly over the 60 s from START_MS;
* ``eta M START_MS``: M Celery tasks with an ETA, due the same way;
* ``dcb-clear``: every periodic task and schedule deleted;
* ``chart RESULTS_JSON PNG``: start lateness p50/p99/max per system and workload.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime

SPREAD_MS = 60_000


def due_times(count: int, start_ms: int) -> list[int]:
    return [start_ms + i * SPREAD_MS // count for i in range(count)]


def dcb_cron(count: int) -> None:
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    every_minute, _ = CrontabSchedule.objects.get_or_create(
        minute="*", hour="*", day_of_week="*", day_of_month="*", month_of_year="*",
        timezone="UTC")
    PeriodicTask.objects.bulk_create(
        PeriodicTask(name=f"cron-{i}", task="peers.record", crontab=every_minute,
                     kwargs=json.dumps({"key": f"cron-{i}"})) for i in range(count))
    PeriodicTasks.update_changed()


def dcb_once(count: int, start_ms: int) -> None:
    from django_celery_beat.models import ClockedSchedule, PeriodicTask, PeriodicTasks

    clocks = ClockedSchedule.objects.bulk_create(
        ClockedSchedule(clocked_time=datetime.fromtimestamp(due / 1000, UTC))
        for due in due_times(count, start_ms))
    PeriodicTask.objects.bulk_create(
        PeriodicTask(name=f"once-{i}", task="peers.record", clocked=clock, one_off=True,
                     kwargs=json.dumps({"key": f"once-{i}", "due_ms": due}))
        for i, (clock, due) in enumerate(zip(clocks, due_times(count, start_ms), strict=True)))
    PeriodicTasks.update_changed()


def dcb_clear() -> None:
    """One ``TRUNCATE``: the ORM's ``delete()`` collects every row and runs django-celery-beat's
    per-row delete signals, which took over 300 s for 10,000 one-off tasks."""
    from django.db import connection
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        PeriodicTask,
        PeriodicTasks,
    )

    tables = ", ".join(connection.ops.quote_name(model._meta.db_table)
                       for model in (PeriodicTask, ClockedSchedule, CrontabSchedule))
    with connection.cursor() as cursor:
        # The tables are the models' own names, quoted: nothing from outside.
        cursor.execute(f"TRUNCATE {tables} CASCADE")  # nosec B608
    PeriodicTasks.update_changed()


def eta(count: int, start_ms: int) -> None:
    from peers_celery import record

    for i, due in enumerate(due_times(count, start_ms)):
        record.apply_async(kwargs={"key": f"once-{i}", "due_ms": due},
                           eta=datetime.fromtimestamp(due / 1000, UTC))


def chart(results_path: str, png_path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in json.load(open(results_path))["rows"]  # noqa: SIM115
            if r.get("start_lateness_ms")]
    labels = [f"{r['system']}\n{r['workload']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 5))
    width = 0.27
    for offset, stat in enumerate(("p50", "p99", "max")):
        values = [max(r["start_lateness_ms"][stat], 1) for r in rows]
        ax.bar([i + (offset - 1) * width for i in range(len(rows))], values, width, label=stat)
    ax.set_yscale("log")
    ax.set_ylabel("start lateness, ms (log)")
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_title("chrono bench peers: start lateness per system")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def main(argv: list[str]) -> None:
    command, args = argv[0], argv[1:]
    if command == "chart":
        chart(*args)
        return
    import django

    django.setup()
    if command == "migrate":
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
    elif command == "dcb-cron":
        dcb_cron(int(args[0]))
    elif command == "dcb-once":
        dcb_once(int(args[0]), int(args[1]))
    elif command == "dcb-clear":
        dcb_clear()
    elif command == "eta":
        eta(int(args[0]), int(args[1]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peers_settings")
    main(sys.argv[1:])
