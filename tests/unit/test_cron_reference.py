"""Property: Chrono's fire times agree with cronsim 2.x, an independent implementation of Debian
cron's DST rules, on random standard expressions in 12 zones at both DST transitions of 2026.

cronsim reads a one-value range with a step (``5-5/2``) as ``5/2`` (from 5 to the end of the
field), where Vixie and Debian cron read it as ``5``; that form is left out of the generated
expressions (a unit test in test_cron.py covers Chrono's reading). Only five-field expressions
are compared: cronsim applies its Debian DST handling to those alone.

One divergence is cronsim's: a wildcard job advances its hour field by UTC hours, so after Lord
Howe's 30-minute fall-back (02:00 +11 -> 01:30 +10:30) ``* */2 * * *`` goes from 01:00 to 02:30,
missing 02:00-02:29, which the wall clock does show. Chrono fires at 02:00
(test_wildcard_job_after_a_half_hour_fall_back_follows_the_wall_clock); in Lord Howe only
fixed-time expressions are compared. And when a day's midnight is skipped (Beirut, Havana,
Santiago), cronsim's wildcard mode can yield that day's 00:00, a wall time that does not exist
(``* */2 * * */4`` in Beirut on 29 March 2026 gives "00:00 +02:00", which is 01:00 +03:00, an odd
hour). Debian evaluates a wildcard job at the first real minute after the jump instead
(``cron.c``). When cronsim yields a time that does not exist, it is asked again from the second
before the instant that time names: it then lands on the first real minute and goes on from
there. Even so, from that midnight cronsim then steps by UTC hours (``* 1 * * */4`` in Havana
on 8 March 2026 goes from the missing 00:00 to 02:00 and misses 01:00), so in the zones whose
clocks change at midnight a wildcard expression is compared with both day fields ``*`` (the day
then never moves the cursor onto a missing midnight).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.cron import parse_cron

ZONES = (
    "America/New_York", "Europe/Berlin", "Europe/London", "Australia/Sydney",
    "Australia/Lord_Howe",  # 30-minute shift
    "America/Havana",  # at midnight
    "Asia/Beirut",  # at midnight
    "America/Santiago",  # southern hemisphere, at midnight
    "Pacific/Auckland", "Africa/Cairo", "Europe/Chisinau",
    "Antarctica/Troll",  # a two-hour shift
)
COMPARED = 8
MIDNIGHT_ZONES = frozenset({"America/Havana", "Asia/Beirut", "America/Santiago", "Africa/Cairo"})


def transitions(zone_name: str, year: int = 2026) -> list[datetime]:
    """The instants (UTC) at which the zone's offset changes during ``year``."""
    zone = ZoneInfo(zone_name)
    found = []
    moment = datetime(year, 1, 1, tzinfo=UTC)
    offset = moment.astimezone(zone).utcoffset()
    while moment.year == year:
        later = moment + timedelta(minutes=30)
        if later.astimezone(zone).utcoffset() != offset:
            found.append(later)
            offset = later.astimezone(zone).utcoffset()
        moment = later
    return found


def exists(moment: datetime) -> bool:
    """False for an aware wall time in a spring-forward gap."""
    return moment == moment.astimezone(UTC).astimezone(moment.tzinfo)


def cronsim_times(expr: str, start: datetime, zone: ZoneInfo) -> list[datetime]:
    """cronsim's next COMPARED times after ``start``, restarted past any that does not exist."""
    times: list[datetime] = []
    iterator = CronSim(expr, start.astimezone(zone))
    for _ in range(COMPARED * 3):
        moment = next(iterator)
        if exists(moment):
            times.append(moment)
            if len(times) == COMPARED:
                break
        else:
            iterator = CronSim(expr, (moment.astimezone(UTC) - timedelta(seconds=1)
                                      ).astimezone(zone))
    return times


CASES = [(zone, index) for zone in ZONES for index in range(2)]


def test_every_zone_has_two_transitions_in_2026() -> None:
    assert {zone: len(transitions(zone)) for zone in ZONES} == {zone: 2 for zone in ZONES}


def field(low: int, high: int, *, near: tuple[int, ...] = (), star: bool = True
          ) -> st.SearchStrategy[str]:
    """A random cron field of values low..high, biased towards ``near`` (the hours of a
    transition), never a one-value range with a step."""
    value = st.sampled_from(near) if near else st.integers(low, high)
    value = st.one_of(value, st.integers(low, high))

    def item(draw_range: tuple[int, int, int | None]) -> str:
        a, b, step = draw_range
        a, b = min(a, b), max(a, b)
        if step is None:
            return str(a) if a == b else f"{a}-{b}"
        if a == b:
            return f"{a}"
        return f"{a}-{b}/{step}"

    largest_step = min(20, high - low)
    ranged = st.tuples(value, value, st.one_of(st.none(), st.integers(2, largest_step))).map(item)
    starred = st.one_of(st.just("*"), st.integers(2, largest_step).map(lambda n: f"*/{n}"))
    listed = st.lists(ranged, min_size=2, max_size=3).map(",".join)
    return st.one_of(starred, ranged, listed) if star else st.one_of(ranged, listed)


def expression(hours: tuple[int, ...], *, wildcards: bool = True) -> st.SearchStrategy[str]:
    days = st.one_of(st.just("*"), st.just("*"), field(1, 28))
    weekdays = st.one_of(st.just("*"), st.just("*"), field(0, 6))
    return st.tuples(field(0, 59, near=(0, 30, 45), star=wildcards),
                     field(0, 23, near=hours, star=wildcards), days,
                     st.just("*"), weekdays).map(" ".join)


def local_hours_around(moment: datetime, zone: ZoneInfo) -> tuple[int, ...]:
    return tuple(sorted({(moment + timedelta(minutes=m)).astimezone(zone).hour
                         for m in range(-180, 181, 30)}))


@pytest.mark.parametrize(("zone_name", "which"), CASES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fire_times_agree_with_cronsim_around_each_transition(zone_name, which, data) -> None:
    zone = ZoneInfo(zone_name)
    transition = transitions(zone_name)[which]
    wildcards = zone_name != "Australia/Lord_Howe"  # see the module's docstring
    expr = data.draw(expression(local_hours_around(transition, zone), wildcards=wildcards),
                     label="expression")
    start = transition - timedelta(hours=data.draw(st.integers(1, 30), label="hours before"))
    start = start.replace(second=0, microsecond=0)

    if zone_name in MIDNIGHT_ZONES and not parse_cron(expr, zone_name).fixed_time:
        minute, hour, _, month, _ = expr.split(" ")
        expr = f"{minute} {hour} * {month} *"  # see the module's docstring
    schedule = parse_cron(expr, zone_name)
    ours = [datetime.fromtimestamp(ms / 1000, UTC)
            for ms in schedule.fire_times_ms(round(start.timestamp() * 1000), COMPARED)]
    reference = [moment.astimezone(UTC) for moment in cronsim_times(expr, start, zone)]

    assert ours == reference, (expr, zone_name, start.isoformat())


def test_wildcard_job_after_a_half_hour_fall_back_follows_the_wall_clock() -> None:
    schedule = parse_cron("* */2 * * *", "Australia/Lord_Howe")
    start = datetime(2026, 4, 4, 14, 0, tzinfo=UTC)  # 01:00 +11:00
    first = schedule.next_fire_ms(round(start.timestamp() * 1000))
    assert datetime.fromtimestamp(first / 1000, ZoneInfo("Australia/Lord_Howe")).isoformat() == \
        "2026-04-05T02:00:00+10:30"
