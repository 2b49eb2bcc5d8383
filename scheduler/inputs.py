"""What every way of creating a job accepts in its text fields and its payload, checked one way.

The job spec validator (:mod:`scheduler.specs`, which every way in goes through: the REST API's
single create, bulk and PATCH, the Python API, the decorators and declared jobs) and the policies'
own bounds (:class:`scheduler.retry.RetryPolicy`, :class:`scheduler.misfire.MisfireRule`) call
these functions, so one input gets one answer and one wording whichever way it arrives. Pure: no
ORM, no config.

A job's payload is its ``args`` and ``kwargs``. Its size is the UTF-8 bytes of each written as
compact JSON (no spaces; only ``"``, ``\\`` and control characters escaped, as
``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` writes it), added: the bytes
PostgreSQL is sent and the worker receives. A payload of exactly the limit is accepted. It may hold
any text but NUL (PostgreSQL's jsonb cannot store it), and integers in the signed 64-bit range:
beyond it most JSON readers (orjson, JavaScript, Go's float64 default) change the number without a
word, so a task would not get what was sent.

A job's text fields (task name, name, queue, cron expression, time zone, run_at, idempotency key,
non-retryable exception names) hold no control character: not NUL, which PostgreSQL cannot
store, and not the others either (a tab or a line feed in a name or a time zone is a mistake, and
an escape sequence in a name shown in a terminal or a log is an attack). A control character is
one of Unicode's category Cc: U+0000-U+001F, U+007F and U+0080-U+009F.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import orjson

CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {0x00: "NUL", 0x09: "tab", 0x0A: "line feed", 0x0D: "carriage return",
                  0x1B: "escape", 0x7F: "delete"}


def control_character_problem(value: str) -> str | None:
    """What to change when ``value`` holds a control character; None when it holds none."""
    found = CONTROL_CHARACTER.search(value)
    if found is None:
        return None
    code = ord(found.group())
    name = _CONTROL_NAMES.get(code)
    character = f"U+{code:04X}, {name}" if name else f"U+{code:04X}"
    return f"Contains a control character ({character}) at position {found.start()}; remove it."


def printable(value: str) -> str:
    """``value`` with each control character written as its escape (``\\u0000``), to quote a
    client's input in a message: PostgreSQL cannot store a NUL (idempotency records and the
    audit keep answers), and nobody can act on an invisible character anyway."""
    if CONTROL_CHARACTER.search(value) is None:
        return value
    return CONTROL_CHARACTER.sub(lambda found: f"\\u{ord(found.group()):04x}", value)


def json_type(value: object) -> str:
    """What kind of JSON value ``value`` is, as a message names it ("an object", "a string")."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def whole_number_problem(value: object, *, low: int, high: int, unit: str = "") -> str | None:
    """What to change when ``value`` is not a whole number from ``low`` to ``high`` (a boolean is
    not one); None when it is. ``unit`` names what it counts (``"milliseconds"``)."""
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return None
    what = f"a whole number{f' of {unit}' if unit else ''} from {low} to {high}"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"Must be {what}, got {json_type(value)}."
    return f"Is negative ({value}); use {what}." if value < 0 <= low else f"Is {value}; use {what}."


def choice_problem(value: object, choices: tuple[str, ...], what: str) -> str | None:
    """What to change when ``value`` is not one of ``choices`` (``what`` names them: "an overlap
    policy"); None when it is one."""
    if isinstance(value, str) and value in choices:
        return None
    shown = f"'{printable(value[:64])}'" if isinstance(value, str) else json_type(value)
    return f"{shown} is not {what}; use one of {', '.join(choices)}."


MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1
_ESCAPED_NUL = b"\\u0000"
# Raises for an integer beyond 53 bits: the rare payload holding one is then walked for the
# integers beyond 64 bits, which orjson would write as they are (up to 2**64 - 1) or refuse.
_INTEGERS_CHECKED = orjson.OPT_STRICT_INTEGER


@dataclass(slots=True)
class EncodedPayload:
    """A job's args and kwargs as compact JSON (UTF-8), with what is wrong with them.

    ``errors`` maps ``"args"`` or ``"kwargs"`` to what to change; ``too_large`` says the size was
    one of the problems (the REST API answers 413 for a single create then)."""

    args_json: bytes
    kwargs_json: bytes
    errors: dict[str, list[str]]
    too_large: bool

    @property
    def size_bytes(self) -> int:
        return len(self.args_json) + len(self.kwargs_json)


def encode_payload(args: list, kwargs: dict, *, max_bytes: int) -> EncodedPayload:
    """``args`` and ``kwargs`` as compact JSON, checked: each can be written as JSON, holds no
    NUL, and together they are at most ``max_bytes`` (a limit of the bytes measured here)."""
    errors: dict[str, list[str]] = {}
    args_json = _encode(args, "args", errors)
    kwargs_json = _encode(kwargs, "kwargs", errors)
    size = len(args_json) + len(kwargs_json)
    # The size of a value that cannot be written is unknown (its bytes are b"").
    too_large = size > max_bytes and args_json != b"" != kwargs_json
    if too_large:
        errors.setdefault("args", []).append(
            f"args and kwargs are {size} bytes as JSON; the limit is {max_bytes} bytes. Pass a "
            "reference (an id, a URL) instead of the data itself.")
    return EncodedPayload(args_json, kwargs_json, errors, too_large)


def plain_payload(args: list, kwargs: dict, *, max_bytes: int, option: int = _INTEGERS_CHECKED
                  ) -> tuple[bytes, bytes] | None:
    """The JSON of :func:`encode_payload` when it would find nothing wrong, else None (it then
    says what): the bulk path's fast check, a third of its cost."""
    try:
        args_json = orjson.dumps(args, option=option)
        kwargs_json = orjson.dumps(kwargs, option=option)
    except orjson.JSONEncodeError:
        return None
    if (len(args_json) + len(kwargs_json) > max_bytes
            or _ESCAPED_NUL in args_json or _ESCAPED_NUL in kwargs_json):
        return None
    return args_json, kwargs_json


# orjson writes datetimes, dataclasses and subclasses of str, int, dict and list itself unless
# told not to; with these it refuses them, as the standard library's json does.
_PYTHON_CHECKED = (_INTEGERS_CHECKED | orjson.OPT_PASSTHROUGH_DATETIME
                   | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)


def plain_python_payload(args: list, kwargs: dict, *, max_bytes: int
                         ) -> tuple[list, dict, bytes, bytes] | None:
    """:func:`plain_payload` of a payload given from Python (``api.schedule_many``'s common
    item), with the copies of ``args`` and ``kwargs`` the JSON gives back: None unless those
    equal them. orjson writes some values json refuses (a UUID, an Enum member, NaN as null, a
    tuple as a list), but then the copy differs; an equal copy means the payload held only
    JSON's own types, so its JSON is the one :func:`encode_payload` writes. One orjson
    encoding of each, which the bulk path's check needs anyway, and a decoding: a tenth of the
    standard library's round trip (``scheduler.python_args.payload``, the way any other
    payload takes, which words what is wrong)."""
    payload = plain_payload(args, kwargs, max_bytes=max_bytes, option=_PYTHON_CHECKED)
    if payload is None:
        return None
    args_copy, kwargs_copy = orjson.loads(payload[0]), orjson.loads(payload[1])
    if args_copy != args or kwargs_copy != kwargs:
        return None
    return args_copy, kwargs_copy, payload[0], payload[1]


def _encode(value: object, name: str, errors: dict[str, list[str]]) -> bytes:
    try:
        encoded = orjson.dumps(value, option=_INTEGERS_CHECKED)
    except orjson.JSONEncodeError:
        found = _first_path(value, name, _is_wide_integer)
        if found is not None:
            path, number = found
            errors[name] = [f"{path} is {_number_text(number)}, outside the signed 64-bit "
                            f"integer range ({MIN_INT64} to {MAX_INT64}); send it as a string."]
            return b""
        try:
            encoded = orjson.dumps(value)
        except orjson.JSONEncodeError as exc:
            errors[name] = [f"Cannot be written as JSON ({exc}); send JSON values only."]
            return b""
    # The escape can also be the text of a backslash followed by "u0000": look.
    if _ESCAPED_NUL in encoded and (found := _first_path(value, name, _has_nul)) is not None:
        errors[name] = [f"{found[0]} contains a NUL character (\\u0000), which cannot be "
                        "stored; remove it or encode the data (e.g. base64)."]
    return encoded


def _is_wide_integer(value: object) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)
            and not MIN_INT64 <= value <= MAX_INT64)


def _has_nul(value: object) -> bool:
    return isinstance(value, str) and "\x00" in value


def _number_text(number: int) -> str:
    """An integer as a message shows it: its digits, or its length when there are too many
    (Python refuses to write more than 4,300 digits)."""
    if number.bit_length() <= 256:
        return str(number)
    if number.bit_length() < 14_000:  # below 4,215 digits
        return f"an integer of {len(str(abs(number)))} digits"
    return f"an integer of about {math.floor(math.log10(abs(number))) + 1} digits"


def _first_path(value: object, root: str, is_wrong) -> tuple[str, object] | None:
    """The path (``kwargs.order.items[3]``, ``args[2]``) and the item of the first key or value
    in ``value`` (document order) for which ``is_wrong`` holds; None when there is none.
    Iterative: a payload may nest deeper than Python's recursion limit."""
    pending: list[tuple[object, str]] = [(value, root)]
    while pending:
        item, path = pending.pop()
        if isinstance(item, dict):
            for key in item:
                if is_wrong(key):
                    return path + _key_path(key), key
            pending.extend((child, path + _key_path(key))
                           for key, child in reversed(item.items()))
        elif isinstance(item, list | tuple):
            pending.extend((child, f"{path}[{index}]")
                           for index, child in reversed(list(enumerate(item))))
        elif is_wrong(item):
            return path, item
    return None


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _key_path(key: object) -> str:
    """``.key`` for a key that reads as a name, else ``["key"]`` (JSON-quoted, shortened)."""
    text = str(key)
    if _IDENTIFIER.match(text):
        return f".{text}"
    quoted = orjson.dumps(text[:64] + ("…" if len(text) > 64 else "")).decode()
    return f"[{quoted}]"
