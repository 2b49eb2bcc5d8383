"""The non-standard cron forms Quartz, Spring and Jenkins users bring: L, W, # and H.

Pure functions used by :mod:`scheduler.cron` while it parses; nothing here knows about time zones.

Day rules (Quartz's documented semantics; weekdays are numbered as in the rest of cron, 0 or 7 =
Sunday … 6 = Saturday, names allowed, not Quartz's 1 = Sunday):

``L`` (day-of-month)     the last day of the month (28, 29, 30 or 31);
``L-n``                  n days before the last day (``L-1`` is the day before it);
``LW``                   the last weekday (Monday-Friday) of the month: the last day, or the
                         Friday before it when it is a Saturday or a Sunday;
``nW``                   the weekday nearest to day n, never leaving the month: a Saturday moves
                         to the Friday before (``1W`` on a Saturday to Monday the 3rd), a Sunday
                         to the Monday after (the last day on a Sunday to the Friday before). A
                         month shorter than n has no such day (as a plain ``31`` has none);
``dL`` (day-of-week)     the last weekday d of the month (``5L``: the last Friday);
``d#k``                  the k-th weekday d of the month, k from 1 to 5 (``5#3``: the third
                         Friday); ``6#5`` fires only in months that have a fifth Saturday.

As in Quartz, such a rule stands alone in its field (no list, range or step around it), and the
other day field must then be unrestricted (``*`` or ``?``): Quartz refuses both, and with the
Vixie either-day rule the meaning of a mix would be a guess. Each refusal says why.

``H`` (any field) is a value hashed from the job's identity (its hash key, the job id), so that
many jobs written ``H * * * *`` spread over the hour instead of piling up at minute 0, and each
job keeps its minute across restarts, edits of its other fields and on every beat replica:
``H`` is one value of the field's range (day-of-month 1-28, so every month has it, as in
Jenkins), ``H(a-b)`` one value of ``a-b``, ``H/n`` and ``H(a-b)/n`` every n-th value from an
offset below n hashed the same way. The hash is BLAKE2b of the key, the field and the item's
place in its list: a stable function, unlike Python's ``hash()``, which is salted per process.
A field written with ``H`` does not begin with ``*``, so for daylight saving it is fixed-time.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import re
from typing import NamedTuple, Protocol

from scheduler.errors import InvalidCronExpression

# H, H/n, H(a-b), H(a-b)/n.
HASH_ITEM = re.compile(r"H(?:\((\d+)-(\d+)\))?(?:/(\d+))?\Z", re.IGNORECASE)
_LAST_DAY = re.compile(r"L(?:-(\d+))?\Z", re.IGNORECASE)
_NEAREST_WEEKDAY = re.compile(r"(\d+)W\Z", re.IGNORECASE)
_LAST_WEEKDAY_OF_MONTH = re.compile(r"LW\Z", re.IGNORECASE)
_LAST_OF_WEEKDAY = re.compile(r"(\w+?)L\Z", re.IGNORECASE)
_NTH_OF_WEEKDAY = re.compile(r"(\w+)#(\w*)\Z", re.IGNORECASE)
# Jenkins keeps a hashed day of month in 1-28 so that it exists in every month.
_HASHED_DAY_OF_MONTH_HIGH = 28
_SATURDAY, _SUNDAY = 5, 6  # date.weekday() numbering
MAX_NTH = 5


class FieldSpec(Protocol):
    name: str
    label: str
    low: int
    high: int

    def value_of(self, token: str) -> int | None: ...


class DayRule(NamedTuple):
    """One L/W/# rule: ``kind`` is ``last`` (``offset`` days before the last day),
    ``last_weekday``, ``nearest_weekday`` (to ``day``), ``last_of`` (``weekday``) or ``nth_of``
    (``nth`` ``weekday``); weekdays 0 = Sunday."""

    kind: str
    day: int = 0
    offset: int = 0
    weekday: int = 0
    nth: int = 0


def invalid(spec: FieldSpec, item: str, problem: str) -> InvalidCronExpression:
    return InvalidCronExpression(f"{spec.label} field '{item}' {problem}", field=spec.name)


# ------------------------------------------------------------------------------------- H


def has_hash(token: str) -> bool:
    """True when an item of ``token`` is an ``H`` form."""
    return any(HASH_ITEM.match(item) for item in token.split(","))


def resolve_hashes(token: str, spec: FieldSpec, hash_key: str) -> str:
    """``token`` with each ``H`` item replaced by the plain item it stands for under
    ``hash_key`` (``H/15`` → ``7-59/15``); other items are left for the ordinary parser."""
    items = token.split(",")
    return ",".join(_resolve_hash(item, index, spec, hash_key) if HASH_ITEM.match(item) else item
                    for index, item in enumerate(items))


def hashed_value(hash_key: str, field: str, index: int, modulus: int) -> int:
    """A number in ``[0, modulus)`` that depends only on the key, the field and the index."""
    digest = hashlib.blake2b(f"{hash_key}\x1f{field}\x1f{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % modulus


def _resolve_hash(item: str, index: int, spec: FieldSpec, hash_key: str) -> str:
    match = HASH_ITEM.match(item)
    assert match is not None
    low_text, high_text, step_text = match.groups()
    star_high = 6 if spec.name == "day_of_week" else spec.high
    low = spec.low
    high = _HASHED_DAY_OF_MONTH_HIGH if spec.name == "day_of_month" else star_high
    if low_text is not None:
        low, high = int(low_text), int(high_text)
        if not spec.low <= low <= high <= star_high:
            raise invalid(spec, item, f"has the range {low}-{high}; use H(a-b) with "
                                      f"{spec.low} <= a <= b <= {star_high}")
    width = high - low + 1
    if step_text is None:
        return str(low + hashed_value(hash_key, spec.name, index, width))
    step = int(step_text)
    if not 1 <= step <= width:
        raise invalid(spec, item, f"has step {step}; use a step from 1 to {width} (the size of "
                                  f"its range {low}-{high})")
    start = low + hashed_value(hash_key, spec.name, index, step)
    return f"{start}-{high}/{step}"


# ----------------------------------------------------------------------------- L, W and #


def uses_day_rule(token: str) -> bool:
    """True when ``token`` (a day field) holds an L, W or # form."""
    upper = token.upper()
    return "L" in upper.replace("JUL", "") or "W" in upper.replace("WED", "") or "#" in upper


def parse_day_of_month_rule(token: str, spec: FieldSpec) -> DayRule:
    """The rule of a day-of-month token that uses L or W. Raises InvalidCronExpression."""
    _alone(token, spec, "'L' and 'W'")
    if _LAST_WEEKDAY_OF_MONTH.match(token):
        return DayRule("last_weekday")
    if match := _LAST_DAY.match(token):
        offset = int(match.group(1) or 0)
        if offset > 30:
            raise invalid(spec, token, f"goes back {offset} days; use L-0 to L-30")
        return DayRule("last", offset=offset)
    if match := _NEAREST_WEEKDAY.match(token):
        day = int(match.group(1))
        if not 1 <= day <= 31:
            raise invalid(spec, token, "is out of range; 'nW' takes a day from 1 to 31")
        return DayRule("nearest_weekday", day=day)
    raise invalid(spec, token, "is not valid; use L (last day), L-n (n days before it), LW "
                               "(last weekday) or nW (the weekday nearest day n, such as 15W)")


def parse_day_of_week_rule(token: str, spec: FieldSpec) -> DayRule:
    """The rule of a day-of-week token that uses L or #. Raises InvalidCronExpression."""
    _alone(token, spec, "'L' and '#'")
    if match := _NTH_OF_WEEKDAY.match(token):
        weekday = _weekday(match.group(1), token, spec)
        nth_text = match.group(2)
        if not (nth_text.isascii() and nth_text.isdigit()) or not 1 <= int(nth_text) <= MAX_NTH:
            raise invalid(spec, token, f"asks for occurrence '{nth_text}'; a month has at most "
                                       f"{MAX_NTH} of a weekday, so use d#1 to d#{MAX_NTH}")
        return DayRule("nth_of", weekday=weekday, nth=int(nth_text))
    if match := _LAST_OF_WEEKDAY.match(token):
        return DayRule("last_of", weekday=_weekday(match.group(1), token, spec))
    raise invalid(spec, token, "is not valid; use dL (the last weekday d of the month, such as "
                               "5L) or d#k (its k-th, such as 5#3)")


def _alone(token: str, spec: FieldSpec, what: str) -> None:
    if "," in token or "/" in token or (token.count("-") and not _LAST_DAY.match(token)):
        raise invalid(spec, token, f"mixes {what} with a list, range or step; Quartz allows "
                                   f"{what} only on their own in a field, so write one job "
                                   "per rule")


def _weekday(text: str, token: str, spec: FieldSpec) -> int:
    value = spec.value_of(text)
    if value is None or not 0 <= value <= 7:
        raise invalid(spec, token, f"names weekday '{text}'; use 0-7 (0 and 7 are Sunday) or "
                                   "a name sun-sat")
    return value % 7


@functools.lru_cache(maxsize=4096)
def rule_days(rules: tuple[DayRule, ...], year: int, month: int) -> frozenset[int]:
    """The days of ``year``-``month`` that ``rules`` select."""
    first_weekday, last_day = calendar.monthrange(year, month)  # Monday = 0
    days: set[int] = set()
    for rule in rules:
        day = _rule_day(rule, year, month, first_weekday, last_day)
        if day is not None:
            days.add(day)
    return frozenset(days)


def _rule_day(rule: DayRule, year: int, month: int, first_weekday: int, last_day: int
              ) -> int | None:
    def weekday_of(day: int) -> int:  # Monday = 0
        return (first_weekday + day - 1) % 7

    if rule.kind == "last":
        day = last_day - rule.offset
        return day if day >= 1 else None
    if rule.kind == "last_weekday":
        return last_day - {_SATURDAY: 1, _SUNDAY: 2}.get(weekday_of(last_day), 0)
    if rule.kind == "nearest_weekday":
        return _nearest_weekday(rule.day, last_day, weekday_of(rule.day))
    target = (rule.weekday - 1) % 7  # cron's Sunday = 0 as date.weekday()'s Sunday = 6
    first = 1 + (target - first_weekday) % 7
    if rule.kind == "nth_of":
        day = first + 7 * (rule.nth - 1)
        return day if day <= last_day else None
    return first + 7 * ((last_day - first) // 7)  # last_of


def _nearest_weekday(day: int, last_day: int, weekday: int) -> int | None:
    if day > last_day:
        return None
    if weekday == _SATURDAY:
        return day + 2 if day == 1 else day - 1
    if weekday == _SUNDAY:
        return day - 2 if day == last_day else day + 1
    return day
