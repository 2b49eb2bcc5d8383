"""Django settings of Chrono, built from :mod:`chronocore.config` (read once from the environment).

``chronoadmin.settings_production`` extends these with the hardening ``manage.py check --deploy``
asks for.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

# get_config() here: Django's settings are built from the configuration: the first edge of every
# process.
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
    "axes",
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
    # Last, as django-axes asks: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
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

# Admin logins (docs/security.md, "Brute force and rate limits"). django-axes counts failures
# per username and client address, in PostgreSQL (its database handler: the web processes share
# the counts with no cache to configure, they outlive a restart, the attempts show in the admin,
# and `chrono axes_reset_username` works on them; a failed login is rare enough for a write).
# Its backend comes first and refuses a locked-out pair before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = CHRONO.admin_login_failure_limit
AXES_COOLOFF_TIME = timedelta(seconds=CHRONO.admin_lockout_cooloff_s)
# Username and address together: a stranger's guesses never lock an administrator out of their
# own address (the address alone would, behind one NAT or proxy); a few tries per username and
# address in a cool-off, against the validators' passwords below, is no useful guessing rate.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "chronocore.rest.client_limits.client_address"
AXES_COOLOFF_MESSAGE = (
    f"Too many failed logins for this username from this address: locked for "
    f"{CHRONO.admin_lockout_cooloff_s // 60} minutes after the last attempt. A platform "
    "administrator can unlock it sooner (chrono axes_reset_username USERNAME)."
)

# Passwords set through Django (createsuperuser, changepassword, the admin's password forms),
# in development too, so a password chosen on a laptop holds in production. Users created in
# code (the demo's, the tests') are not validated.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# What a starting process does about a service set in a way that loses work
# (chronocore/service_checks.py): development logs it; settings_production refuses to start.
CHRONO_SERVICE_CHECKS = CHRONO.service_checks or "warn"

DATABASES = {"default": database_settings(CHRONO.database_url)}
DATABASES["default"]["TEST"] = {"NAME": CHRONO.test_database_name}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
FORMAT_MODULE_PATH = ["chronoadmin.formats"]

STATIC_URL = "static/"
STATIC_ROOT = Path(CHRONO.static_root) if CHRONO.static_root else BASE_DIR / ".chrono" / "static"
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
