"""A cron schedule in words, for ``chrono cron-preview --explain``.

Pure. It reads the expression as written (after :func:`scheduler.cron.parse_cron` accepted it),
so ``H`` is described as hashed and, when a hash key was given, with the values it came to.
"""

from __future__ import annotations

from scheduler.cron import MACROS, CronSchedule
from scheduler.cron_extensions import HASH_ITEM

_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")
_ORDINALS = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}
_NAMES = {"month": [m[:3].lower() for m in _MONTHS],
          "day-of-week": [d[:3].lower() for d in _WEEKDAYS]}


def explain(schedule: CronSchedule) -> str:
    """``schedule`` in words, one sentence per part, with how it meets DST."""
    tokens = MACROS.get(schedule.expression.lower(), schedule.expression).split(" ")
    if len(tokens) == 5:
        tokens = ["0", *tokens]
    second, minute, hour, day, month, weekday = tokens
    lines = [
        f"At {_time_words(second, minute, hour)}",
        f"on {_days_words(day, weekday, schedule.days_either)}",
        f"in {_field_words(month, 'month', plural='every month')}",
        f"time zone {schedule.timezone}",
    ]
    if schedule.hash_key:
        lines.append(f"H hashed from key '{schedule.hash_key}'")
    elif "H" in schedule.expression.upper().replace("THU", ""):
        lines.append("H hashed from the job's id (give --hash-key to see one job's values)")
    if schedule.fixed_time:
        lines.append("fixed-time for daylight saving: a skipped local time fires once right "
                     "after the gap, a repeated one once")
    else:
        lines.append("wildcard for daylight saving (its minute or hour begins with '*'): it "
                     "follows the wall clock, nothing in a gap, both passes of a repeated hour")
    return ";\n".join(lines) + "."


def _time_words(second: str, minute: str, hour: str) -> str:
    parts = [_field_words(minute, "minute", plural="every minute"),
             _field_words(hour, "hour", plural="every hour")]
    if second != "0":
        parts.insert(0, _field_words(second, "second", plural="every second"))
    return ", ".join(parts)


def _days_words(day: str, weekday: str, either: bool) -> str:
    day_free = day in ("*", "?")
    week_free = weekday in ("*", "?")
    if day_free and week_free:
        return "every day"
    if week_free:
        return _month_day_words(day)
    if day_free:
        return _weekday_words(weekday)
    joiner = " or " if either else " and "
    return _month_day_words(day) + joiner + _weekday_words(weekday)


def _month_day_words(token: str) -> str:
    upper = token.upper()
    if upper == "L":
        return "the last day of the month"
    if upper.startswith("L-"):
        return f"{upper[2:]} days before the last day of the month"
    if upper == "LW":
        return "the last weekday (Monday to Friday) of the month"
    if upper.endswith("W"):
        return f"the weekday nearest day {upper[:-1]} of the month"
    return _field_words(token, "day-of-month", plural="every day of the month")


def _weekday_words(token: str) -> str:
    upper = token.upper()
    if "#" in upper:
        day, _, nth = upper.partition("#")
        return f"the {_ORDINALS.get(int(nth), nth)} {_weekday_name(day)} of the month"
    if upper.endswith("L") and len(upper) > 1:
        return f"the last {_weekday_name(upper[:-1])} of the month"
    return _field_words(token, "day-of-week", plural="every day of the week")


def _weekday_name(text: str) -> str:
    lowered = text.lower()
    if lowered in _NAMES["day-of-week"]:
        return _WEEKDAYS[_NAMES["day-of-week"].index(lowered)]
    return _WEEKDAYS[int(text) % 7]


def _field_words(token: str, what: str, *, plural: str) -> str:
    if token in ("*", "?"):
        return plural
    return " and ".join(_item_words(item, what) for item in token.split(","))


def _item_words(item: str, what: str) -> str:
    if match := HASH_ITEM.match(item):
        low, high, step = match.groups()
        where = f" in {low}-{high}" if low is not None else ""
        if step:
            return f"every {step}th {what} from a hashed offset{where}"
        return f"a hashed {what}{where}"
    base, _, step = item.partition("/")
    if base == "*":
        return f"every {step}th {what}" if step else f"every {what}"
    low, dash, high = base.partition("-")
    if step:
        end = f" through {_value(high, what)}" if dash else ""
        return f"every {step}th {what} from {_value(low, what)}{end}"
    if dash:
        return f"{what} {_value(low, what)} through {_value(high, what)}"
    return f"{what} {_value(low, what)}"


def _value(text: str, what: str) -> str:
    lowered = text.lower()
    names = _NAMES.get(what)
    if names and lowered in names:
        index = names.index(lowered)
        return _MONTHS[index] if what == "month" else _WEEKDAYS[index]
    if what == "month" and text.isdigit():
        return _MONTHS[int(text) - 1]
    if what == "day-of-week" and text.isdigit():
        return _WEEKDAYS[int(text) % 7]
    return text
