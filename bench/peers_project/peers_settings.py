"""Django settings of the peers' project: django-celery-beat's models in ``chrono_peers``."""

from __future__ import annotations

import os
from urllib.parse import unquote, urlsplit

_db = urlsplit(os.environ["PEERS_DATABASE_URL"])

SECRET_KEY = "chrono-bench-peers-not-a-secret"  # nosec B105 # a throwaway benchmark project
INSTALLED_APPS = ["django_celery_beat"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.path.lstrip("/"),
        "USER": unquote(_db.username or ""),
        "PASSWORD": unquote(_db.password or ""),
        "HOST": _db.hostname or "127.0.0.1",
        "PORT": _db.port or 5432,
    }
}
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DJANGO_CELERY_BEAT_TZ_AWARE = True
