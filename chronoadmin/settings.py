"""Django settings of Chrono, built from :mod:`chronocore.config` (read once from the environment).

``chronoadmin.settings_production`` extends these with the hardening ``manage.py check --deploy``
asks for.
"""

from __future__ import annotations

from pathlib import Path

from chronocore.config import database_settings, get_config

CHRONO = get_config()
BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = CHRONO.secret_key
DEBUG = CHRONO.debug
ALLOWED_HOSTS = list(CHRONO.allowed_hosts)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "chronocore.apps.ChronoCoreConfig",
    "chronoadmin.apps.ChronoAdminConfig",
    "scheduler.apps.SchedulerConfig",
    "reaper.apps.ReaperConfig",
    "search.apps.SearchConfig",
    "workflows.apps.WorkflowsConfig",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "chronoadmin.middleware.RequestIdMiddleware",
    # Static files (the admin's stylesheets, Swagger UI) served by the web process itself, with
    # compression and far-future caching, so `chrono web` needs no separate file server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "search.middleware.AuditActorMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "chronoadmin.urls"
WSGI_APPLICATION = "chronoadmin.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": database_settings(CHRONO.database_url)}
DATABASES["default"]["TEST"] = {"NAME": CHRONO.test_database_name}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
FORMAT_MODULE_PATH = ["chronoadmin.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".chrono" / "static"
# Development and the demo serve static files straight from the apps (no collectstatic step);
# production settings serve the collected, fingerprinted copies instead.
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "chronocore.rest.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        # Last: reached only by requests without credentials, which it limits per address.
        "chronocore.rest.client_limits.AnonymousRateThrottle",
    ],
    # The client's address (rate limits, admin lockouts): None would believe whatever a client
    # writes in X-Forwarded-For.
    "NUM_PROXIES": CHRONO.trusted_proxy_count,
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["chronoadmin.api.parsers.LimitedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "EXCEPTION_HANDLER": "chronoadmin.api.handlers.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Chrono API",
    "DESCRIPTION": "Schedule one-time and cron jobs for Celery workers. See docs/api.md.",
    "VERSION": "1",
    # Swagger UI and ReDoc from the bundled sidecar package: no CDN, works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # The ways to authenticate; the anonymous rate limit sits among the authentication classes
    # but lets nobody in.
    "AUTHENTICATION_WHITELIST": [
        "chronocore.rest.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "scheduler.models.JobStatus",
        "ExecutionStatusEnum": "scheduler.models.ExecutionStatus",
        "OverlapPolicyEnum": "scheduler.models.OverlapPolicy",
        "MisfirePolicyEnum": "scheduler.models.MisfirePolicyChoice",
        "WorkflowRunStatusEnum": "workflows.models.WorkflowRunStatus",
    },
    "PREPROCESSING_HOOKS": ["chronoadmin.api.schema.exclude_aliases"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "chronoadmin.api.schema.add_error_responses",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "chronoadmin.middleware.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "request": {
            "format": "%(asctime)s %(levelname)s %(name)s [request %(request_id)s]: %(message)s"
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "request_console": {
            "class": "logging.StreamHandler",
            "formatter": "request",
            "filters": ["request_id"],
        },
    },
    "loggers": {
        "chrono": {"handlers": ["console"], "level": "INFO", "propagate": False},
        # Django sends a 500's traceback only to mail_admins when DEBUG is off; Chrono logs it
        # (with the request id the response carries) where the process's other logs go.
        "django.request": {
            "handlers": ["request_console"], "level": "ERROR", "propagate": False,
        },
    },
}
