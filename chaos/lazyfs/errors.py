"""The failures of a LazyFS mount, one class each."""

from __future__ import annotations

__all__ = ["LazyFSControlError", "LazyFSError", "LazyFSMountError"]


class LazyFSError(Exception):
    """Base of the LazyFS failures."""


class LazyFSMountError(LazyFSError):
    """The mount process did not come up (or not in time); the message has its log."""


class LazyFSControlError(LazyFSError):
    """A control command got no answer or failed."""
