"""What the operator commands share (``chrono tenants``, ``api-keys``, ``jobs``,
``executions``): ``--json`` or a table, the exit codes a script can rely on, and the tenant
named by its slug.

Exit codes (docs/cli.md): 0 done; 1 failed (a service down, anything unexpected); 2 usage (an
unknown option, a value that is not valid: argparse's own code); 3 not found (no such tenant,
job, execution or key, or one of another tenant); 4 conflict: the object's state refused the
action and nothing changed (pausing a job that is not ACTIVE, a slug already taken, a key
already revoked, a quota reached); 5 partly done: a bulk load wrote the valid items and refused
the others (its report says which). With ``--json`` a refused command also prints
``{"error": {"code": …, "exit_code": …, "message": …}}`` on stdout; the message goes to stderr
in every case.

The commands are thin: they parse, call the layer that owns the operation (``scheduler.api``
for jobs and executions, the tenancy models for tenants and keys) and report. Their JSON is
the REST API's shape for the same object (its serializers), so a script reads one format.
"""

from __future__ import annotations

import getpass
import io
import json
import shutil
import sys
import uuid
from collections.abc import Callable, Sequence
from enum import IntEnum

from django.core.management.base import BaseCommand, CommandError
from rich import box
from rich.console import Console
from rich.table import Table

from chronocore.models import Tenant


class ExitCode(IntEnum):
    """What a script can tell from an operator command's exit status."""

    OK = 0
    FAILED = 1
    USAGE = 2
    NOT_FOUND = 3
    CONFLICT = 4
    PARTLY_DONE = 5


class OperatorError(CommandError):
    """Raised by an operator command that refuses: the message says what to change; ``code``
    names the case in ``--json`` output, ``returncode`` is the exit status."""

    code = "failed"
    exit_code = ExitCode.FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message, returncode=int(self.exit_code))
        self.message = message


class Invalid(OperatorError):
    """Raised when a value given on the command line is not valid (exit 2, as argparse)."""

    code = "invalid"
    exit_code = ExitCode.USAGE


class NotFound(OperatorError):
    """Raised when the tenant, job, execution or key named does not exist (for the tenant)."""

    code = "not_found"
    exit_code = ExitCode.NOT_FOUND


class Conflict(OperatorError):
    """Raised when the object's state refuses the action; nothing was changed."""

    code = "conflict"
    exit_code = ExitCode.CONFLICT


class PartlyDone(OperatorError):
    """Raised after a bulk command printed its report, when it refused some items (exit 5)."""

    code = "partly_done"
    exit_code = ExitCode.PARTLY_DONE


class Report:
    """What an action prints, and the error to raise once it is printed (a bulk load's refused
    items)."""

    def __init__(self, data: dict, then: OperatorError | None = None) -> None:
        self.data = data
        self.then = then


class OperatorCommand(BaseCommand):
    """A subcommand-style management command with ``--json`` and operator exit codes.

    Subclasses set ``actions`` (name -> help) and define ``add_action_arguments(name,
    parser)`` and ``action_<name>(**options)``, which returns what to print: a
    :class:`Listing` or a dict (one object, printed as two columns)."""

    actions: dict[str, str] = {}

    def add_arguments(self, parser):
        # Django's CommandParser hands its subparsers how it was called: a usage error exits 2
        # from a shell, and raises CommandError under call_command.
        subparsers = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        for name, help_text in self.actions.items():
            sub = subparsers.add_parser(name, help=help_text, description=help_text)
            sub.add_argument("--json", action="store_true", dest="as_json",
                             help="print JSON (the REST API's shape) instead of a table")
            self.add_action_arguments(name, sub)

    def add_action_arguments(self, name: str, parser) -> None:
        """Add the arguments of action ``name``."""

    def handle(self, *args, action: str, as_json: bool = False, **options):
        try:
            output = getattr(self, f"action_{action.replace('-', '_')}")(**options)
        except OperatorError as exc:
            if as_json:
                self.stdout.write(json.dumps({"error": {
                    "code": exc.code, "exit_code": int(exc.exit_code), "message": exc.message}}))
            raise
        then = output.then if isinstance(output, Report) else None
        if isinstance(output, Report):
            output = output.data
        if as_json:
            data = output.rows if isinstance(output, Listing) else output
            self.stdout.write(json.dumps(data, indent=2, default=str))
        elif isinstance(output, Listing):
            self.stdout.write(output.table(), ending="")
        else:
            self.stdout.write(_pairs(output), ending="")
        if then is not None:
            raise then


class Listing:
    """Rows (dicts, as JSON prints them) and the columns a table shows of them."""

    def __init__(self, rows: list[dict], columns: Sequence[str],
                 formats: dict[str, Callable[[object], str]] | None = None) -> None:
        self.rows = rows
        self.columns = columns
        self.formats = formats or {}

    def table(self) -> str:
        if not self.rows:
            return "(none)\n"
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
        for column in self.columns:
            table.add_column(column, overflow="fold")
        for row in self.rows:
            table.add_row(*(self.formats.get(column, _cell)(row.get(column))
                            for column in self.columns))
        return _render(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _pairs(data: dict) -> str:
    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in data.items():
        table.add_row(key, _cell(value))
    return _render(table)


def _render(renderable: object) -> str:
    """A table as text: as wide as the terminal when there is one, else wide enough not to
    fold ids (a pipe, a file, a test)."""
    width = shutil.get_terminal_size((200, 24)).columns if sys.stdout.isatty() else 200
    buffer = io.StringIO()
    Console(file=buffer, width=width, no_color=True, highlight=False,
            color_system=None).print(renderable)
    return buffer.getvalue()


def tenant_by_slug(slug: str) -> Tenant:
    """The tenant with this slug (or id); NotFound naming it otherwise."""
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        try:
            tenant = Tenant.objects.filter(tenant_id=uuid.UUID(slug)).first()
        except ValueError:
            tenant = None
    if tenant is None:
        raise NotFound(f"no tenant has the slug {slug!r}; see chrono tenants list")
    return tenant


def add_tenant_argument(parser) -> None:
    parser.add_argument("--tenant", required=True, metavar="SLUG",
                        help="the tenant's slug (or id)")


def add_limit_argument(parser, *, default: int = 50) -> None:
    parser.add_argument("--limit", type=_positive, default=default,
                        help=f"at most this many rows, newest first (default {default})")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def actor() -> str:
    """Who the audit rows of a command's changes name: ``cli:<operating-system user>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid (a container)
        return "cli:unknown"
