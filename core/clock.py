"""Time zones for the `current_datetime` tool: which IANA names are known (zoneinfo's database),
and the current time in one, falling back to UTC (with a note saying so) for a zone unknown or
not given, never an error."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, available_timezones

MAX_ZONE_CHARS = 64  # the longest IANA name is about 30


@functools.cache
def _zones() -> frozenset[str]:
    # The tz database of this machine, read once: the same for every user (no user data).
    return frozenset(available_timezones()) | {"UTC"}


def known_time_zone(name: str) -> bool:
    """Whether `name` is an IANA time zone zoneinfo has, e.g. "Europe/Lisbon" (case matters)."""
    return isinstance(name, str) and len(name) <= MAX_ZONE_CHARS and name in _zones()


@dataclass(frozen=True)
class LocalTime:
    zone: str  # the zone the time is in (UTC when the one asked for is unknown)
    now: datetime  # aware, in that zone
    note: str | None = None  # why it is not the zone asked for


def now_in(zone: str | None, now: datetime | None = None) -> LocalTime:
    """The time now (or `now`) in `zone`; in UTC, with a note, for None or an unknown zone."""
    instant = now or datetime.now(UTC)
    if zone is None or not zone.strip():
        return LocalTime("UTC", instant.astimezone(UTC), "The time zone is not known: this is UTC.")
    if not known_time_zone(zone):
        shown = zone[:MAX_ZONE_CHARS]
        note = f"{shown!r} is not a known time zone: this is UTC."
        return LocalTime("UTC", instant.astimezone(UTC), note)
    return LocalTime(zone, instant.astimezone(ZoneInfo(zone)))


def utc_offset(moment: datetime) -> str:
    """E.g. "+05:30" or "-03:00"."""
    offset = moment.utcoffset()
    minutes = round(offset.total_seconds() / 60) if offset is not None else 0
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
