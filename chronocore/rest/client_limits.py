"""Limits by client address, for the callers no tenant budget covers: failed API
authentications and requests without credentials (docs/security.md, "Brute force and rate
limits"). Both are GCRA budgets in Redis (:mod:`.gcra`), shared by every web process, refused
with 429 and ``Retry-After``.

- **Failed authentications** (``api_failed_auth_per_minute`` per address): a wrong, unknown,
  revoked or malformed API key counts one. An address over its budget gets 429 for *every*
  request that carries a key, before the key is looked at: were a right key still let in, the
  answer would tell a guesser which key is right, and the limit would slow nothing down.
- **Requests without credentials** (``api_anonymous_rate_per_minute`` per address): the
  schema and documentation pages, and calls that forgot their key (401 within the budget).

The client's address is DRF's (:func:`client_address`, ``NUM_PROXIES`` =
``CHRONO_TRUSTED_PROXY_COUNT``); django-axes locks admin logins out by the same address.
"""

from __future__ import annotations

from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import Throttled
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

# get_config() here: DRF's authentication and throttles call these per request: the process edge,
# nothing owns them to hand them the configuration.
from chronocore.config import get_config
from chronocore.rest import gcra

FAILED_AUTH_KEY_PREFIX = f"{gcra.KEY_PREFIX}failed-auth:"
ANONYMOUS_KEY_PREFIX = f"{gcra.KEY_PREFIX}anonymous:"
# An address is at most 45 characters (IPv6 with an IPv4 tail); behind proxies a client can put
# anything in the first X-Forwarded-For entries, so what goes into a Redis key is cut short.
_ADDRESS_MAX_CHARS = 64


def client_address(request: HttpRequest | Request) -> str | None:
    """The caller's address: ``REMOTE_ADDR``, or behind ``CHRONO_TRUSTED_PROXY_COUNT`` proxies
    the ``X-Forwarded-For`` entry the outermost one appended (DRF's throttle identity); None
    when the request has none (a request made in code). It is also django-axes'
    ``AXES_CLIENT_IP_CALLABLE``."""
    address = BaseThrottle().get_ident(request)
    return address[:_ADDRESS_MAX_CHARS] if address else None


def _key(prefix: str, request: Request) -> str:
    return f"{prefix}{client_address(request) or 'unknown'}"


def refuse_if_failing(request: Request) -> None:
    """Raise :class:`Throttled` (429) when the caller's address has used up its budget of
    failed authentications. Called before an API key is checked."""
    rate = get_config().api_failed_auth_per_minute
    wait_s = gcra.peek(_key(FAILED_AUTH_KEY_PREFIX, request), rate)
    if wait_s is not None:
        raise Throttled(wait_s, detail=(
            f"Too many failed authentications from this address (at most {rate} a minute); "
            "every request with an API key from it is refused until then."))


def count_failure(request: Request) -> None:
    """Count one failed authentication against the caller's address."""
    gcra.take(_key(FAILED_AUTH_KEY_PREFIX, request), get_config().api_failed_auth_per_minute)


class AnonymousRateThrottle(BaseAuthentication):
    """The budget of requests without credentials, per client address.

    An authentication class rather than a throttle: DRF checks permissions before throttles,
    so a throttle never sees an anonymous request to an endpoint that needs a caller (401 comes
    first). Last in ``DEFAULT_AUTHENTICATION_CLASSES``, this runs exactly when every class before
    it found no credentials; it authenticates nobody (returns None) or refuses with 429.
    """

    def authenticate(self, request: Request) -> None:
        rate = get_config().api_anonymous_rate_per_minute
        wait_s = gcra.take(_key(ANONYMOUS_KEY_PREFIX, request), rate)
        if wait_s is not None:
            raise Throttled(wait_s, detail=(
                f"Too many requests without credentials from this address (at most {rate} a "
                "minute). Send 'Authorization: Bearer chrono_<prefix>_<secret>' with your "
                "tenant's API key."))
        return None
