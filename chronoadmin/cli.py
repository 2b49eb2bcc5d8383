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
  services cluster-up|cluster-down rabbitmq [--ports A,B,C]
                            three clustered RabbitMQ nodes on loopback; prints BROKER_URL
  services cluster-up|cluster-down redis [--ports A,…,F]
                            a Redis Cluster on loopback (3 primaries, a replica each); prints
                            REDIS_URL and CHRONO_REDIS_CLUSTER
  services cluster-up|cluster-down postgresql [--ports A,B]
                            a PostgreSQL primary and its synchronous standby on loopback;
                            prints the multi-host DATABASE_URL
  migrate                   create or update the database schema
  beat [--replica-id ID]    run a beat replica (fires timers)
  worker [--queues Q,…]     run a Celery worker with Chrono's integration
  reaper                    re-queue the jobs of dead workers (several may run)
  indexer                   ship audit events to the search engine
  workflow-engine           apply workflow step ends (workers do too, by default)
  rebuild-timers            rewrite every pending timer in Redis from PostgreSQL
  retention [--dry-run]     executions' partitions ahead, expired days dropped once shipped,
                            shipped audit rows deleted (the reaper runs it too)
  rebuild-job-counts        count the jobs by tenant and status again (the triggers keep them)
  web [ADDR:PORT]           serve the admin and API
  dev                       beat, worker, reaper, indexer and web in one command
  demo                      a demo tenant with jobs, then dev; prints where to look
  check --tag chrono_services
                            Chrono's checks of its services (a plain check is Django's)
  cron-preview EXPR --timezone TZ --count N [--after ISO]
  sync-jobs MODULE[:APP] … [--tenant SLUG] [--dry-run]
                            create or update the cron jobs of @chrono_job tasks
  import-beat MODULE:APP [--tenant SLUG] [--dry-run]
                            turn a Celery app's beat_schedule into Chrono cron jobs
  grants add|list|remove --tenant SLUG [--task PATTERN] [--queue PATTERN]
                            the tasks and queues a tenant may schedule
  tenant-staff add|list|remove --tenant SLUG [--user NAME] [--role viewer|operator|admin]
                            the admin users who work for a tenant (they see only its rows)
  tenants create|list|disable|enable [SLUG] [--name NAME]
                            the platform's tenants
  api-keys issue|list|revoke --tenant SLUG [--name NAME] [KEY]
                            a tenant's REST API keys (a new key is printed once)
  jobs list|show|pause|resume|trigger|cancel --tenant SLUG [JOB_ID]
                            a tenant's jobs, changed as the API and the admin change them
  executions list|show --tenant SLUG [--job JOB_ID] [EXECUTION_ID]
                            a tenant's executions
  config-reference [--check]
                            write docs/configuration.md from the settings (--check: is it up to
                            date?)
  bench NAME                run a benchmark, print one JSON line
  help [COMMAND]            this list, or COMMAND's options

  The operator commands (tenants, api-keys, jobs, executions) take --json and exit 0 done,
  1 failed, 2 usage, 3 not found, 4 refused by the object's state (docs/cli.md). Long-running
  processes (beat, worker, reaper, indexer, workflow-engine) take --log-level LEVEL and
  --log-format plain|json. chrono --version prints Chrono's version.
"""


def version() -> str:
    """``chrono <version> (Django …, Celery …)``: the installed distribution's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        own = installed("chrono-scheduler")
    except PackageNotFoundError:  # run from a source tree that was never installed
        own = "unknown"
    return f"chrono {own} (Django {installed('django')}, Celery {installed('celery')})"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[-1] == "--version" and len(argv) <= 2:
        # `chrono --version`, and `chrono beat --version`, which would print Django's.
        print(version())
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv == ["help"]:
        print(USAGE)
        print(_other_commands())
        return 0
    if argv[0] == "help":  # chrono help COMMAND: its options
        argv = [argv[1], "--help"]
    if argv[0] == "services":
        import localservices

        return localservices.main(argv[1:])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")
    _dashed_utility()(["chrono", *argv]).execute()
    return 0


def _other_commands() -> str:
    """The Django management commands USAGE does not list, by app (chrono help)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")
    import django
    from django.core.management import get_commands

    django.setup()
    listed = {line.split()[0].replace("-", "_") for line in USAGE.splitlines()[1:]
              if line.startswith("  ") and not line.startswith("   ") and line.strip()}
    by_app: dict[str, list[str]] = {}
    for name, app in sorted(get_commands().items()):
        if name not in listed:
            by_app.setdefault(app.rpartition(".")[2], []).append(name.replace("_", "-"))
    lines = ["Any other Django management command also runs as chrono COMMAND:"]
    for app, names in sorted(by_app.items()):
        lines.append(f"  [{app}] {' '.join(names)}")
    return "\n".join(lines)


def _dashed_utility():
    from django.core.management import ManagementUtility

    class DashedNames(ManagementUtility):
        """Django's command runner, taking a command's dashed name (``rebuild-timers``) for its
        module's (``rebuild_timers``) and keeping the dashed one in its usage lines."""

        def fetch_command(self, subcommand: str):
            return super().fetch_command(subcommand.replace("-", "_"))

    return DashedNames


if __name__ == "__main__":
    sys.exit(main())
