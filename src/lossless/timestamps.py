"""Timestamps: one sortable text form, parsed from whatever the sources carry.

Stored timestamps are UTC, microsecond precision, fixed width
(``2026-02-17T07:37:00.000000Z``), so text order is time order in every back end.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["format_ts", "now", "parse_ts"]

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def now() -> datetime:
    """The current time, UTC, with microseconds."""
    return datetime.now(UTC)


def format_ts(value: datetime) -> str:
    """Render *value* in the stored form; naive datetimes are taken as UTC."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime(_FORMAT)


def parse_ts(value: object) -> datetime | None:
    """Parse a source timestamp: ISO-8601 text, or epoch seconds/milliseconds as a number.

    Returns ``None`` for values that are absent or not a timestamp, so a message without a
    usable time falls back to its ingest time instead of failing.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return _storable(value if value.tzinfo else value.replace(tzinfo=UTC))
    if isinstance(value, int):
        # Integer arithmetic keeps milliseconds exact at any date (a float drifts after ~2242).
        try:
            if abs(value) > 10**11:  # milliseconds since the epoch (any date after 1973)
                return _EPOCH + timedelta(milliseconds=value)
            return _EPOCH + timedelta(seconds=value)
        except OverflowError:
            return None
    if isinstance(value, float):
        seconds = value / 1000.0 if abs(value) > 1e11 else value
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return None
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        return _storable(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))
    return None


def _storable(value: datetime) -> datetime | None:
    """*value* if it has a UTC form (0001-01-01T00:00+01:00 has none); else ``None``."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        return None
    return value
