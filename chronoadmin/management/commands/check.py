"""``chrono check``: Django's system checks; with ``--tag chrono_services``, Chrono's checks of
its services' settings.

Django's ``check`` command. Asked for their tag, it also asks Redis, RabbitMQ and PostgreSQL for
the settings Chrono depends on (:mod:`chronoadmin.checks`). Only then: a plain ``check`` (and
``check --deploy``) stays the static check a build runs without the services, and Django runs
the registered checks before the other commands too, which (a beat, a worker) must not wait on
or refuse to start over a service that is down a moment.
"""

from __future__ import annotations

import contextlib

from django.core.management.commands.check import Command as DjangoCheckCommand

from chronoadmin.checks import SERVICES_TAG, asking_services


class Command(DjangoCheckCommand):
    help = (DjangoCheckCommand.help + f" With --tag {SERVICES_TAG}, Chrono's checks of its "
            "services' settings, which ask Redis, RabbitMQ and PostgreSQL.")

    def handle(self, *app_labels, **options):
        asked = SERVICES_TAG in (options.get("tags") or ())
        with asking_services() if asked else contextlib.nullcontext():
            return super().handle(*app_labels, **options)
