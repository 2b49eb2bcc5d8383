"""``chrono config-reference [--check] [--output PATH]``: write docs/configuration.md from
:class:`chronocore.config.ChronoConfig` (:mod:`chronocore.config_reference`)."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chronocore import config_reference


class Command(BaseCommand):
    help = "Write the configuration reference (docs/configuration.md) from ChronoConfig."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true",
                            help="write nothing; exit 1 when the page is stale or a field "
                                 "undocumented")
        parser.add_argument("--output", type=Path, default=config_reference.PAGE,
                            help=f"where to write (default {config_reference.PAGE})")

    def handle(self, *args, check: bool, output: Path, **options):
        if problems := config_reference.undocumented():
            raise CommandError("the configuration reference does not cover ChronoConfig:\n  "
                               + "\n  ".join(problems)
                               + "\n(describe each field in chronocore/config_reference.py)")
        page = config_reference.render()
        if check:
            current = output.read_text() if output.exists() else ""
            if current != page:
                raise CommandError(f"{output} is stale: run chrono config-reference")
            self.stdout.write(f"{output} is up to date")
            return
        output.write_text(page)
        self.stdout.write(f"wrote {output}")
