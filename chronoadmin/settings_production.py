"""Production settings: ``DJANGO_SETTINGS_MODULE=chronoadmin.settings_production``.

Everything of :mod:`chronoadmin.settings`, hardened as ``manage.py check --deploy`` asks: HTTPS
only, secure cookies, HSTS, a secret key that must come from the environment
(``CHRONO_SECRET_KEY``), and service credentials that are neither empty nor a well-known default
(``DATABASE_URL``, ``REDIS_URL``, ``BROKER_URL``, ``SEARCH_URL``, as completed from the
credentials file; docs/security.md). The admin's login lockout and password validators come from
the base settings unchanged: development keeps them too, so what holds on a laptop holds here.
"""

from __future__ import annotations

from chronoadmin.settings import *  # noqa: F403
from chronoadmin.settings import CHRONO
from chronocore.config import ConfigError
from chronocore.credentials import weak_credentials

if CHRONO.secret_key.startswith("chrono-dev-insecure") or len(CHRONO.secret_key) < 50:
    raise ConfigError(
        "set CHRONO_SECRET_KEY to a random string of at least 50 characters for production "
        "(python -c 'import secrets; print(secrets.token_urlsafe(64))')"
    )

_weak = weak_credentials(CHRONO.service_urls(), search_api_key=CHRONO.search_api_key)
if _weak:
    raise ConfigError(
        "production settings refuse empty or default service credentials:\n  "
        + "\n  ".join(_weak)
        + f"\n(a loopback URL without a password takes it from {CHRONO.credentials_path}, "
        "which `chrono services up` generates)"
    )

# A process refuses to start when a service it depends on loses work (CHRONO_SERVICE_CHECKS
# given wins: "warn" to start anyway, "off" to ask nothing).
CHRONO_SERVICE_CHECKS = CHRONO.service_checks or "error"

DEBUG = False
SECURE_SSL_REDIRECT = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = 31_536_000
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"

# Static files: the fingerprinted, compressed copies `chrono collectstatic` writes to STATIC_ROOT
# (served by whitenoise with far-future caching); `chrono web` refuses to start without them.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = False
