"""The ``chrono`` command: one front door to every Chrono process and tool.

``chrono services …`` runs without Django (it starts the database Django needs). Every other
subcommand is a Django management command (``chrono cron-preview`` is ``manage.py cron_preview``),
so ``python manage.py …`` works the same.
"""

from __future__ import annotations

import os
import sys

USAGE = """usage: chrono COMMAND [ARGS]

  services up|down|status   install and start PostgreSQL, Redis, RabbitMQ and OpenSearch,
                            with generated credentials
  services rotate [SERVICE…]
                            new passwords for the services (then restart Chrono's processes)
  migrate                   create or update the database schema
  beat [--replica-id ID]    run a beat replica (fires timers)
  worker [--queues Q,…]     run a Celery worker with Chrono's integration
  reaper                    re-queue the jobs of dead workers (several may run)
  indexer                   ship audit events to the search engine
  rebuild-timers            rewrite every pending timer in Redis from PostgreSQL
  rebuild-job-counts        count the jobs by tenant and status again (the triggers keep them)
  web [ADDR:PORT]           serve the admin and API
  dev                       beat, worker, reaper, indexer and web in one command
  demo                      a demo tenant with jobs, then dev; prints where to look
  cron-preview EXPR --timezone TZ --count N [--after ISO]
  sync-jobs MODULE[:APP] … [--tenant SLUG] [--dry-run]
                            create or update the cron jobs of @chrono_job tasks
  import-beat MODULE:APP [--tenant SLUG] [--dry-run]
                            turn a Celery app's beat_schedule into Chrono cron jobs
  grants add|list|remove --tenant SLUG [--task PATTERN] [--queue PATTERN]
                            the tasks and queues a tenant may schedule
  tenant-staff add|list|remove --tenant SLUG [--user NAME] [--role viewer|operator|admin]
                            the admin users who work for a tenant (they see only its rows)
  bench NAME                run a benchmark, print one JSON line
  (any other Django management command)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] == "services":
        import localservices

        return localservices.main(argv[1:])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")
    from django.core.management import execute_from_command_line

    command = argv[0].replace("-", "_")
    execute_from_command_line(["chrono", command, *argv[1:]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
