"""``Idempotency-Key`` on POST: a retried request gets the first response instead of a second job.

Keys are per tenant and kept ``idempotency_ttl_s`` (24 h). The first request with a key claims
it (a row with no response yet, unique per tenant and key), runs, and stores its response. A
request with the same key and the same method, path and body bytes then gets that response again
(header ``Idempotent-Replayed: true``); with anything different it gets 422. While the first
request is still running a repeat gets 409; a claim whose request died without answering is taken
over after ``idempotency_lock_timeout_s``. Only a request that succeeded (2xx) is stored: one that
failed (bad input, quota, rate, state: whether raised or answered) releases its claim, so fixing
it and retrying under the same key works.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from chronoadmin.api.errors import IdempotencyKeyReused, IdempotentRequestInProgress

# get_config() here: called by the REST views (and purge_idempotency_keys, a command): the process
# edge.
from chronocore.config import get_config
from chronocore.models import IdempotencyRecord, Tenant
from chronocore.rest.permissions import tenant_of

HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
KEY_PATTERN = re.compile(r"[\x21-\x7e]{1,200}\Z")

Handler = Callable[..., Response]


def idempotent(handler: Handler) -> Handler:
    """Wrap a POST handler of a tenant endpoint with Idempotency-Key handling."""

    @functools.wraps(handler)
    def wrapper(view, request: Request, *args, **kwargs) -> Response:
        key = request.headers.get(HEADER)
        tenant = tenant_of(request)
        if key is None or tenant is None:
            return handler(view, request, *args, **kwargs)
        if not KEY_PATTERN.match(key):
            raise ValidationError({HEADER: [
                "Use 1 to 200 printable ASCII characters without spaces, e.g. a UUID."
            ]})
        request.data  # noqa: B018 -- parse first: a malformed or oversized body claims nothing
        fingerprint = request_fingerprint(request)
        replay = claim(tenant, key, fingerprint)
        if replay is not None:
            return replay
        try:
            response = handler(view, request, *args, **kwargs)
        except BaseException:
            release(tenant, key)
            raise
        if not status.is_success(response.status_code):
            # An answer that is an error without an exception (a bulk request none of whose
            # items was valid answers 400 with its per-item errors) consumes nothing either.
            release(tenant, key)
            return response
        IdempotencyRecord.objects.filter(tenant=tenant, key=key).update(
            response_status=response.status_code, response_body=storable(response.data)
        )
        return response

    return wrapper


def release(tenant: Tenant, key: str) -> None:
    """Drop this request's claim of ``key``, so a corrected request may use it."""
    IdempotencyRecord.objects.filter(tenant=tenant, key=key, response_status__isnull=True).delete()


def storable(value: object) -> object:
    """``value`` with every NUL character written out as ``\\u0000``: PostgreSQL's jsonb cannot
    hold NUL, and an error message may quote a client's input that contains one."""
    if isinstance(value, str):
        return value.replace("\x00", "\\u0000") if "\x00" in value else value
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


def request_fingerprint(request: Request) -> str:
    body = getattr(request, "raw_body", b"")
    digest = hashlib.sha256(f"{request.method}\n{request.path}\n".encode())
    digest.update(body)
    return digest.hexdigest()


def claim(tenant: Tenant, key: str, fingerprint: str) -> Response | None:
    """Claim ``key`` for this request (None), or the response to replay; raises 422 or 409."""
    config = get_config()
    now = timezone.now()
    for _ in range(3):  # a lost race with an expiry or a takeover is simply tried again
        try:
            with transaction.atomic():
                IdempotencyRecord.objects.create(
                    tenant=tenant, key=key, request_fingerprint=fingerprint, created_at=now
                )
            return None
        except IntegrityError:
            pass
        record = IdempotencyRecord.objects.filter(tenant=tenant, key=key).first()
        if record is None:
            continue
        if now - record.created_at > timedelta(seconds=config.idempotency_ttl_s):
            IdempotencyRecord.objects.filter(pk=record.pk, created_at=record.created_at).delete()
            continue
        if record.request_fingerprint != fingerprint:
            raise IdempotencyKeyReused(
                f"Idempotency-Key '{key}' was used with a different request (method, path or "
                "body) in the last 24 h; use a new key for a new request."
            )
        if record.response_status is not None:
            return Response(
                record.response_body,
                status=record.response_status,
                headers={REPLAYED_HEADER: "true"},
            )
        stale = now - record.created_at > timedelta(seconds=config.idempotency_lock_timeout_s)
        if stale and IdempotencyRecord.objects.filter(
            pk=record.pk, created_at=record.created_at, response_status__isnull=True
        ).update(created_at=now):
            return None
        raise IdempotentRequestInProgress(
            f"A request with Idempotency-Key '{key}' is still being processed; retry in a few "
            "seconds to get its response."
        )
    raise IdempotentRequestInProgress(
        f"Idempotency-Key '{key}' is contended; retry in a few seconds."
    )


def purge_expired() -> int:
    """Delete records older than the retention; returns how many."""
    ttl = timedelta(seconds=get_config().idempotency_ttl_s)
    deleted, _ = IdempotencyRecord.objects.expired(older_than=ttl).delete()
    return deleted
