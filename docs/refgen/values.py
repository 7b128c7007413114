"""Config defaults as the reference shows them: ``unset``, ``true``, and sizes and durations
spelled out (``1048576 (1 MiB)``, ``604800000 (7 days)``)."""

from __future__ import annotations

import logging

__all__ = ["show_default", "show_text_default"]

log = logging.getLogger(__name__)

_BYTE_UNITS = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))
_MS_UNITS = (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def _human(name: str, value: object) -> str:
    """``1048576 (1 MiB)`` for byte sizes, ``604800000 (7 days)`` for durations."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return ""
    units: tuple[tuple[str, int], ...] = ()
    if name.endswith((".bytes", ".size", "memory")) or "bytes" in name.split("."):
        units = _BYTE_UNITS
    elif name.endswith(".ms"):
        units = _MS_UNITS
    for unit, size in units:
        if value >= size and value % size == 0:
            return f" ({value // size} {unit})"
    return ""


def show_default(name: str, value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str) and not value:
        return '`""`'
    return f"`{value}`{_human(name, value)}"


def show_text_default(name: str, text: str) -> str:
    """A default given as text (topic configs): numbers get their size or duration."""
    try:
        number: object = int(text)
    except ValueError:
        number = text
    return show_default(name, number)
