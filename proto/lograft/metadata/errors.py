"""Errors of the metadata layer: corrupt input and broken invariants."""

from __future__ import annotations

from lograft.protocol.errors import InvariantError, LograftError

__all__ = ["CorruptMetadataError", "MetadataInvariantError"]


class CorruptMetadataError(LograftError):
    """Metadata bytes (a log entry or a snapshot) are malformed, oversized or inconsistent.

    Raised for untrusted input only; the caller drops the input and changes nothing. Unlike
    the produce path's ``CORRUPT_MESSAGE`` it is not retriable: the same bytes stay bad.
    """

    code = 2
    error_name = "CORRUPT_MESSAGE"
    retriable = False


class MetadataInvariantError(InvariantError):
    """Replaying a record would break an invariant of the metadata image.

    A committed record that cannot be replayed means a controller bug; the node must stop
    rather than serve metadata that differs from its peers', so this is never caught and
    logged away (except by :func:`~lograft.metadata.codec.decode_snapshot`, which turns it
    into :class:`CorruptMetadataError` because a snapshot from disk or a peer is untrusted).
    """
