"""``chrono check``: Django's system checks, with Chrono's checks of its services' settings.

Django's ``check`` command, which also asks Redis, RabbitMQ and PostgreSQL for the settings
Chrono depends on (:mod:`chronoadmin.checks`; ``--tag chrono_services`` for those alone). Only
this command asks them: Django runs the registered checks before other commands too, and those
(a beat, a worker) must not wait on or refuse to start over a service that is down a moment.
"""

from __future__ import annotations

from django.core.management.commands.check import Command as DjangoCheckCommand

from chronoadmin.checks import asking_services


class Command(DjangoCheckCommand):
    help = (DjangoCheckCommand.help + " Chrono's checks of its services' settings (tag "
            "chrono_services) run here, and before no other command.")

    def handle(self, *app_labels, **options):
        with asking_services():
            return super().handle(*app_labels, **options)
