"""``chrono web [ADDR:PORT]``: serve the admin, dashboard and API (Django's server, for dev)."""

from __future__ import annotations

from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the admin, the dashboard and the API. In production run chronoadmin.wsgi " \
           "under a WSGI server (gunicorn, uwsgi) instead."

    def add_arguments(self, parser):
        parser.add_argument("addrport", nargs="?", default="127.0.0.1:8000")

    def handle(self, addrport, **options):
        call_command("runserver", addrport, use_reloader=False)
