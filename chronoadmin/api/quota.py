"""The pending-job quota of a tenant: how many jobs it may have waiting to fire.

Counting a tenant's pending jobs in PostgreSQL on every request would cost more than the insert
it guards at bulk rates, so the count is kept in Redis (``chrono:api:pending:<tenant>``), taken
from PostgreSQL again every ``pending_jobs_recount_s`` (the key expires) and raised by each
create in between. Jobs that fire or are cancelled lower it at the next recount, so the quota is
exact to within that interval; concurrent creates may overshoot it by one request's jobs.
"""

from __future__ import annotations

import uuid

from chronoadmin.api.errors import QuotaExceeded

# get_config() here: called by the REST views per request: the process edge, nothing owns it to
# hand it the configuration.
from chronocore.config import get_config
from chronocore.rest.gcra import api_redis
from scheduler.models import Job

KEY_PREFIX = "chrono:api:pending:"


def _key(tenant_id: uuid.UUID) -> str:
    return f"{KEY_PREFIX}{tenant_id}"


def pending_count(tenant_id: uuid.UUID) -> int:
    """The tenant's pending jobs, counted at most every ``pending_jobs_recount_s``."""
    client = api_redis()
    cached = client.get(_key(tenant_id))
    if cached is not None:
        return int(cached)
    config = get_config()
    # Counting stops just past the quota: that is all the check needs to know.
    count = Job.objects.for_tenant(tenant_id).pending()[: config.pending_jobs_quota + 1].count()
    client.set(_key(tenant_id), count, ex=config.pending_jobs_recount_s, nx=True)
    return count


def check_quota(tenant_id: uuid.UUID, new_jobs: int) -> None:
    """Raise :class:`QuotaExceeded` (429) when ``new_jobs`` more would pass the quota."""
    config = get_config()
    pending = pending_count(tenant_id)
    if pending + new_jobs > config.pending_jobs_quota:
        raise QuotaExceeded(
            f"This tenant has {pending} pending jobs and the quota is "
            f"{config.pending_jobs_quota}; {new_jobs} more would pass it. Cancel or delete jobs "
            "that are no longer needed, or wait for some to run.",
            wait_s=config.pending_jobs_recount_s,
        )


def count_created(tenant_id: uuid.UUID, created: int) -> None:
    """Raise the cached count by jobs just committed. Should the count have expired meanwhile,
    the new key gets the recount interval as its life too, so it never outlives a recount."""
    if created:
        pipe = api_redis().pipeline(transaction=False)
        pipe.incrby(_key(tenant_id), created)
        pipe.expire(_key(tenant_id), get_config().pending_jobs_recount_s, nx=True)
        pipe.execute()
