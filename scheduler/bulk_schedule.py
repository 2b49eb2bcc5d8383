"""Many jobs at once from Python: one-time and cron jobs, each with its own arguments,
idempotency key and options, written by the job writer's COPY mode (the REST bulk path's).

``api.schedule_many`` (re-exported by :mod:`scheduler.api`) takes a list of dicts, each holding the
keyword arguments :func:`scheduler.api.schedule_once`, :func:`scheduler.api.schedule_cron` or
:func:`scheduler.api.schedule_interval` take (``task_name`` among them; ``cron`` makes a cron job,
``every`` an interval job). Each item is converted (:mod:`scheduler.python_args`), checked by the
one validator (:mod:`scheduler.specs`) and by the REST bulk path's per-item checks
(:class:`scheduler.job_writer.ItemChecks`: its task's grant, its calendars), and refused alone: what
one item gets wrong is reported for its index, the others are written, in one transaction, by
:func:`scheduler.job_writer.copy_streamed`, and their timers added to Redis when it commits. No ORM
object is made per job, which is what lets it run at the bulk path's rate. The items are checked
a chunk at a time (:data:`CHECK_CHUNK`) while the jobs' COPY is open, so PostgreSQL takes in one
chunk's rows while Python checks the next (two cores at work, not one after the other: the
REST bulk path checks a whole request, then copies it).
"""

from __future__ import annotations

import difflib
import math
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from scheduler import job_writer, python_args, specs
from scheduler.errors import InvalidJob, SpecInvalid

# The keys an item may hold: schedule_once's, schedule_cron's and schedule_interval's keyword
# arguments (but the deprecated max_retries, which this newer call never took).
ITEM_ARGUMENTS = (
    "task_name", "delay", "at", "cron", "every", "anchor", "timezone", "args", "kwargs",
    "queue", "name", "idempotency_key", "retry", "soft_timeout_ms", "hard_timeout_ms",
    "misfire", "jitter_ms", "overlap", "calendars",
)  # fmt: skip
# The schedule arguments, of which an item gives exactly one.
_SCHEDULE_ARGUMENTS = ("delay", "at", "cron", "every")
_ITEM_ARGUMENT_SET = frozenset(ITEM_ARGUMENTS)
# The arguments of the common item, a one-time job by delay without options
# (:func:`_plain_spec`).
_PLAIN_ARGUMENT_SET = frozenset(("task_name", "name", "queue", "args", "kwargs", "delay",
                                 "idempotency_key"))


@dataclass(frozen=True)
class ItemError:
    """One problem of one item: its index in the call, the argument at fault (None for a rule
    spanning several), and what to change."""

    index: int
    field: str | None
    message: str


@dataclass
class ScheduledMany:
    """What :func:`schedule_many` did: per item, in order, the job's id (a string) or None for
    a refused item; the refused items' problems; and the indexes of the items whose
    idempotency key named a job that already existed (their id is that job's; nothing was
    written for them)."""

    ids: list[str | None]
    errors: list[ItemError] = field(default_factory=list)
    existing: list[int] = field(default_factory=list)

    @property
    def created(self) -> int:
        """Jobs written by the call."""
        return sum(job_id is not None for job_id in self.ids) - len(self.existing)

    @property
    def failed(self) -> int:
        """Items refused."""
        return sum(job_id is None for job_id in self.ids)


def schedule_many(
    jobs: Iterable[Mapping[str, object]],
    *,
    tenant: object,
    defaults: Mapping[str, object] | None = None,
    by: str = "",
) -> ScheduledMany:
    """Schedule every job of ``jobs``, each a dict of :func:`~scheduler.api.schedule_once`'s,
    :func:`~scheduler.api.schedule_cron`'s or :func:`~scheduler.api.schedule_interval`'s
    keyword arguments (``task_name``; ``delay`` or ``at``, or ``cron`` with ``timezone``, or
    ``every`` with ``anchor``; ``args``, ``kwargs``, ``queue``, ``name``, ``idempotency_key``,
    ``retry``, the timeouts, ``misfire``; ``jitter_ms``, ``overlap`` and ``calendars`` for cron
    and interval jobs). ``defaults`` fills the keys an item leaves out (a common ``task_name``
    or ``queue``).

    Every item is held to the rules of the one-job calls, its task to the tenant's grants, its
    calendars to the tenant's calendars (a name it has none of, or calendars that leave the job no
    occurrence, refuse the item: field ``calendars``); a refused item is reported in ``errors`` (its
    index, the argument, the message) and the others are written in one transaction by COPY. An
    idempotency key already used by a job of the tenant (or by an earlier item) gives that job's id
    and writes nothing, as ``schedule_once`` returns the first job. Raises InvalidJob (field
    ``tenant``) for an unknown or disabled tenant."""
    tenant_id = _tenant_id(tenant)
    items = list(jobs)
    result = ScheduledMany(ids=[None] * len(items))
    limits = job_writer.current_limits()
    base = dict(defaults or {})
    job_writer.check_tenant_active(tenant_id)
    if not items:
        return result
    converted: list[int] = []  # the indexes of the items that became specs, in order
    copied = job_writer.copy_streamed(
        tenant_id, _converted_chunks(items, base, limits, converted, result.errors),
        job_writer.ItemChecks(tenant_id), known_keys=_keys_given(base, items), by=by,
        audit_data={"via": "schedule_many"})
    for index, job_id in zip(converted, copied.ids, strict=True):
        result.ids[index] = job_id
    result.existing = [converted[position] for position in copied.existing]
    result.errors += [ItemError(converted[position],
                                specs.PYTHON_ARGUMENTS.get(spec_field, spec_field), message)
                      for position, spec_field, message in copied.refused]
    result.errors.sort(key=lambda error: error.index)  # stable: an item's errors keep order
    return result


# Items converted a chunk at a time, each chunk's rows sent to the COPY while the next is made.
CHECK_CHUNK = 1_000


def _converted_chunks(items: list, base: dict[str, object], limits: specs.Limits,
                      converted: list[int], errors: list[ItemError]
                      ) -> Iterator[tuple[list[specs.JobSpec], list[str | None]]]:
    """The specs and keys of the items that pass the spec's rules, a chunk of
    :data:`CHECK_CHUNK` items at a time, made as each chunk is asked for (by the job writer's
    open COPY, :func:`scheduler.job_writer.copy_streamed`, which runs the tenant's checks:
    nothing here queries); their indexes go to ``converted`` and the other items' problems to
    ``errors``, in order."""
    for start in range(0, len(items), CHECK_CHUNK):
        chunk_specs: list[specs.JobSpec] = []
        chunk_keys: list[str | None] = []
        for index in range(start, min(start + CHECK_CHUNK, len(items))):
            try:
                spec, key = _checked_item(_with_defaults(base, items[index]), limits)
            except SpecInvalid as exc:
                errors += [ItemError(index, argument, message)
                           for argument, message in specs.python_problems(exc)]
                continue
            except InvalidJob as exc:
                errors.append(ItemError(index, exc.field, exc.message))
                continue
            converted.append(index)
            chunk_specs.append(spec)
            chunk_keys.append(key)
        yield chunk_specs, chunk_keys


def _keys_given(base: dict[str, object], items: list) -> set[str]:
    """Every idempotency key an item gives (or ``base`` gives it): what the job writer looks
    up before its COPY starts. Keys that will be refused may be among them (one more value in
    the look-up)."""
    base_key = base.get("idempotency_key")
    keys = set()
    for item in items:
        key = item.get("idempotency_key", base_key) if isinstance(item, Mapping) else None
        if type(key) is str:
            keys.add(key)
    return keys


def _with_defaults(base: dict[str, object], item: object) -> object:
    """``item`` as a dict with ``base`` under it (the item itself when there is no base and it
    is a dict already: it is read, never changed)."""
    if not base and type(item) is dict:
        return item
    return base | dict(item) if isinstance(item, Mapping) else item


def _tenant_id(tenant: object) -> uuid.UUID:
    tenant_id = getattr(tenant, "tenant_id", tenant)
    try:
        return uuid.UUID(str(tenant_id))
    except ValueError:
        raise InvalidJob(f"tenant {tenant!r} is not a tenant id", field="tenant") from None


def _checked_item(item: object, limits: specs.Limits) -> tuple[specs.JobSpec, str | None]:
    """The spec and idempotency key of one item. Raises InvalidJob (a conversion's first
    problem) or SpecInvalid (every rule's)."""
    if not isinstance(item, dict):
        raise InvalidJob(f"a job is a dict of schedule_once's or schedule_cron's arguments, got "
                         f"{type(item).__name__}", field=None)
    spec = _plain_spec(item, limits) if item.keys() <= _PLAIN_ARGUMENT_SET else None
    spec_item = _spec_item(item) if spec is None else None  # its conversion's error first
    key = item.get("idempotency_key")
    if problem := specs.idempotency_key_problem(key):
        raise InvalidJob(specs.python_message("idempotency_key", problem),
                         field="idempotency_key")
    return spec or specs.parse_job_spec(spec_item, limits), key


def _plain_spec(item: dict, limits: specs.Limits) -> specs.JobSpec | None:
    """The spec of a one-time job by ``delay`` in seconds with no options and a payload of
    JSON's own types (a list of args, a dict of kwargs), by the REST bulk path's own check of
    its plain item (:func:`scheduler.specs.plain_fields_spec`) with no spec item made; None for
    any other item, which takes the general way (and gets its errors worded there). The
    general conversion of such an item costs more than the spec's own validation of it, and
    the REST bulk path's items, which arrive in the spec's shape, pay nothing of the kind (a
    test holds the two ways to the same result)."""
    delay = item.get("delay")
    # type(), not isinstance: a bool (an int) is refused by the general way, as is a float
    # whose milliseconds are not finite.
    if type(delay) is int:
        delay_ms = delay * 1000
    elif type(delay) is float and math.isfinite(delay * 1000):
        delay_ms = round(delay * 1000)
    else:
        return None
    get = item.get
    return specs.plain_fields_spec(get("task_name"), get("name", ""),
                                   get("queue", limits.default_queue), delay_ms,
                                   get("args", []), get("kwargs", {}), limits, from_python=True)


def _spec_item(item: dict) -> dict[str, object]:
    """The spec item of any item (:func:`schedule_many`'s arguments as the spec's fields).
    Raises InvalidJob (a conversion's first problem)."""
    if not item.keys() <= _ITEM_ARGUMENT_SET:
        raise _unknown_argument(item)
    spec_item: dict[str, object] = {}
    if "task_name" in item:
        spec_item["job_type"] = item["task_name"]
    for key in ("name", "queue", "jitter_ms"):
        if key in item:
            spec_item[key] = item[key]
    if "overlap" in item:
        spec_item["overlap_policy"] = item["overlap"]
    spec_item |= python_args.payload(item.get("args"), item.get("kwargs"))
    given = [key for key in _SCHEDULE_ARGUMENTS if key in item]
    if len(given) > 1 and given[-1] in ("cron", "every"):
        raise InvalidJob(f"give cron= for a cron job, every= for an interval job, or delay= or "
                         f"at= for a one-time job, not {' and '.join(given)}",
                         field=given[-1])
    if "anchor" in item and "every" not in item:
        raise InvalidJob("anchor= applies to interval jobs (every=) only; leave it out",
                         field="anchor")
    if "cron" in item:
        spec_item["cron_expression"] = item["cron"]
        spec_item["timezone"] = item.get("timezone", "UTC")
    elif "every" in item:
        spec_item["interval_ms"] = python_args.interval_ms_of(item["every"])
        spec_item["timezone"] = item.get("timezone", "UTC")
        if item.get("anchor") is not None:
            spec_item["interval_anchor"] = item["anchor"]
    else:
        spec_item |= python_args.when(item.get("delay"), item.get("at"))
        if "timezone" in item:
            spec_item["timezone"] = item["timezone"]
    spec_item |= python_args.execution_options(
        None, item.get("retry"), item.get("soft_timeout_ms"), item.get("hard_timeout_ms"),
        item.get("misfire"))
    if "calendars" in item:
        spec_item |= python_args.calendars(item["calendars"], given=True)
    return spec_item


def _unknown_argument(item: Mapping) -> InvalidJob:
    name = next(str(key) for key in item if key not in _ITEM_ARGUMENT_SET)
    close = difflib.get_close_matches(name, ITEM_ARGUMENTS, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return InvalidJob(f"{name!r} is not an argument of a job; {hint}the arguments are: "
                      f"{', '.join(ITEM_ARGUMENTS)}", field=name)
