"""WSGI entry point of the Chrono web process."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chronoadmin.settings")
application = get_wsgi_application()
