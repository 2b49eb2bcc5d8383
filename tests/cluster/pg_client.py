"""A client of Chrono's Python API that keeps creating one-time jobs, for the failover test.

``python -m tests.cluster.pg_client --out FILE --queue Q --rate N --duration-s S`` (with
``DATABASE_URL`` and ``REDIS_URL`` of the cluster under test) creates ``e2e.record_run`` jobs due
``--delay-s`` after their creation, ``N`` a second for ``S`` seconds, and two cron jobs firing
every second. A job counts as accepted once its create call returned: only then is its line
(``<job id> <idempotency key> <accepted ms>``) written to FILE. A create that fails (the primary
went away) is logged as ``ERR <ms> <error>`` and tried again, with the same idempotency key, so
that a commit whose answer was lost does not make a second job.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")

import django  # noqa: E402

django.setup()

from django.db import DatabaseError, close_old_connections, connection  # noqa: E402

from chronocore.models import TaskGrant, Tenant  # noqa: E402
from scheduler import api  # noqa: E402

TENANT_SLUG = "pgfailover"
CRON_JOBS = 2


def tenant() -> Tenant:
    found, _ = Tenant.objects.get_or_create(slug=TENANT_SLUG, defaults={"name": "PG failover"})
    TaskGrant.objects.get_or_create(tenant=found, task_pattern="*", queue_pattern="*")
    return found


def until_done(what, log):
    """Call ``what`` until it returns, closing the broken connection between tries."""
    while True:
        try:
            return what()
        except DatabaseError as exc:
            log.write(f"ERR {time.time_ns() // 1_000_000} {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0] if str(exc) else ''}\n")
            log.flush()
            close_old_connections()
            connection.close()
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--delay-s", type=float, default=2.0)
    args = parser.parse_args(argv)
    with open(args.out, "a") as out:
        owner = until_done(tenant, out)
        for number in range(CRON_JOBS):
            job = until_done(lambda n=number: api.schedule_cron(
                "e2e.record_run", tenant=owner, cron="* * * * * *", queue=args.queue,
                idempotency_key=f"cron-{n}"), out)
            out.write(f"CRON {job.job_id}\n")
        out.write(f"START {time.time_ns() // 1_000_000}\n")
        out.flush()
        started = time.monotonic()
        number = 0
        while (elapsed := time.monotonic() - started) < args.duration_s:
            wait = number / args.rate - elapsed
            if wait > 0:
                time.sleep(wait)
            key = f"once-{number}"
            job = until_done(lambda k=key: api.schedule_once(
                "e2e.record_run", tenant=owner, delay=args.delay_s, queue=args.queue,
                idempotency_key=k), out)
            out.write(f"{job.job_id} {key} {time.time_ns() // 1_000_000}\n")
            out.flush()
            number += 1
        out.write(f"DONE {time.time_ns() // 1_000_000}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
