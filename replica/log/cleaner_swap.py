"""Installing cleaned segments in place of old ones, all or nothing across a crash.

The log cleaner (:mod:`replica.log.cleaner`) stages each cleaned segment beside the log as
``<base>.log.cleaned`` (and its two indexes), fdatasync'ed. The swap
(:meth:`replica.log.partition_log.PartitionLog.commit_cleaning`) then goes:

1. :func:`commit_swap` writes ``cleaner-swap`` (old and new base offsets) atomically and
   synced: the commit point. Before it, a crash leaves the old segments (staged
   ``.cleaned`` files are removed at open).
2. :func:`install_swap` renames the old segments' files to ``*.deleted`` and each staged
   segment's files to their final names (the ``.log`` last), syncs the directory, opens the
   new segments, removes ``cleaner-swap`` and syncs the directory again.

After a crash between 1 and the end of 2, :func:`finish_cleaner_swap` (run by the open)
redoes the renames from the swap file (each rename is idempotent), so the log holds the
new segments, never a mix. A swap file that does not parse is damage, not a torn write (it
is written atomically): the open refuses the directory rather than guess.

Not thread-safe: the caller holds the log's lock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from lograft.durable import fsync_directory, write_file_atomically
from lograft.protocol.errors import KafkaStorageError
from replica.log.cleaner import CleanedGroup, remove_staged_files
from replica.log.offset_index import CorruptIndexError
from replica.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_segment_file_name,
    segment_file,
)

__all__ = [
    "CLEANER_SWAP_FILE",
    "commit_swap",
    "finish_cleaner_swap",
    "install_swap",
    "remove_staged",
]

log = logging.getLogger(__name__)

CLEANER_SWAP_FILE = "cleaner-swap"
"""Written before cleaned segments replace old ones; present only while a swap is done."""
_SWAP_VERSION = 0
_MAX_SWAP_BYTES = 4 * 1024 * 1024


def _encode_swap(old_bases: list[int], new_bases: list[int]) -> bytes:
    return (
        f"{_SWAP_VERSION}\n{','.join(map(str, old_bases))}\n{','.join(map(str, new_bases))}\n"
    ).encode("ascii")


def _read_swap(directory: Path) -> tuple[list[int], list[int]] | None:
    """``(old bases, new bases)`` of a committed cleaner swap, or None if there is none.

    The file is written atomically, so one that does not parse is damage, not a torn write:
    ``KafkaStorageError`` (which of old and new segments are valid is then unknown).
    """
    try:
        with open(directory / CLEANER_SWAP_FILE, "rb") as handle:
            data = handle.read(_MAX_SWAP_BYTES + 1)
    except FileNotFoundError:
        return None
    try:
        if len(data) > _MAX_SWAP_BYTES:
            raise ValueError(f"{len(data)} bytes")
        version, old_text, new_text, trailer = data.decode("ascii").split("\n")
        if int(version) != _SWAP_VERSION or trailer:
            raise ValueError("unexpected layout")
        old_bases = [int(item) for item in old_text.split(",") if item]
        new_bases = [int(item) for item in new_text.split(",") if item]
        if not old_bases or min(old_bases + new_bases) < 0 or not set(new_bases) <= set(old_bases):
            raise ValueError("bases out of range")
    except ValueError as exc:
        raise KafkaStorageError(
            f"invalid {CLEANER_SWAP_FILE} in dir={directory}: {exc}; cannot tell old segments "
            "from cleaned ones"
        ) from exc
    return old_bases, new_bases


def _install_cleaned(directory: Path, base_offset: int) -> None:
    """Rename a staged (``.cleaned``) segment over its final names; the ``.log`` goes last,
    so a staged ``.log`` still present means this base offset is not done yet."""
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
        staged = segment_file(directory, base_offset, suffix + CLEANED_SUFFIX)
        if staged.exists():
            os.replace(staged, segment_file(directory, base_offset, suffix))


def finish_cleaner_swap(directory: Path) -> bool:
    """At open: complete a committed swap, drop staged files of one that never committed.

    With ``cleaner-swap`` present the cleaned segments are committed: each old segment
    without a cleaned successor is removed, each staged segment still present is renamed
    over the old one of its base offset, then the swap file goes. Without it, staged
    (``.cleaned``) files are leftovers of an interrupted cleaning and are removed: the old
    segments are intact. Returns True if it changed the directory (already fsync'ed).
    """
    swap = _read_swap(directory)
    changed = False
    if swap is not None:
        old_bases, new_bases = swap
        for base_offset in old_bases:
            if base_offset not in new_bases:
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                    segment_file(directory, base_offset, suffix).unlink(missing_ok=True)
        for base_offset in new_bases:
            _install_cleaned(directory, base_offset)
        fsync_directory(directory)
        (directory / CLEANER_SWAP_FILE).unlink()
        changed = True
        log.info(
            "finished interrupted cleaner swap dir=%s old_segments=%d new_segments=%d",
            directory,
            len(old_bases),
            len(new_bases),
        )
    for entry in os.scandir(directory):
        if entry.name.endswith(CLEANED_SUFFIX) and parse_segment_file_name(
            entry.name[: -len(CLEANED_SUFFIX)]
        ):
            (directory / entry.name).unlink(missing_ok=True)
            changed = True
    if changed:
        fsync_directory(directory)
    return changed


def remove_staged(directory: Path, bases: Sequence[int]) -> None:
    """Remove the staged files of ``bases``; failures are logged (the open removes them)."""
    for base_offset in bases:
        try:
            remove_staged_files(directory, base_offset)
        except OSError:
            log.exception("removing staged segment failed dir=%s", directory)


def commit_swap(directory: Path, old_bases: list[int], new_bases: list[int]) -> None:
    """Step 1: write ``cleaner-swap``, the commit point (see the module docstring).

    Every staged segment must be there: committing would make the open after a crash drop
    the missing ranges for good. On any failure the staged files are removed and
    ``KafkaStorageError`` is raised; the old segments stay, nothing is lost.
    """
    missing = [
        base_offset
        for base_offset in new_bases
        if not segment_file(directory, base_offset, LOG_SUFFIX + CLEANED_SUFFIX).exists()
    ]
    if missing:
        remove_staged(directory, new_bases)
        raise KafkaStorageError(
            f"cleaner swap of dir={directory} not committed: staged segments {missing} are missing"
        )
    try:
        write_file_atomically(directory / CLEANER_SWAP_FILE, _encode_swap(old_bases, new_bases))
    except OSError as exc:
        remove_staged(directory, new_bases)
        raise KafkaStorageError(
            f"cleaner swap of dir={directory} failed before commit: {exc}"
        ) from exc


def install_swap(
    directory: Path,
    index_interval_bytes: int,
    replaced: Sequence[LogSegment],
    groups: Sequence[CleanedGroup],
    now_ms: int,
) -> tuple[list[Path], list[LogSegment]]:
    """Step 2, after :func:`commit_swap`: the renames, the new segments opened, the swap file
    removed (see the module docstring).

    Returns the old files, now ``*.deleted`` (to unlink off the event loop), and the opened
    new segments in offset order. Each new segment keeps the latest last-modified time of
    the segments it replaces. Raises ``OSError`` or ``KafkaStorageError`` (with the new
    segments closed again); the swap may then be half done, and the next open finishes it.
    """
    deleted: list[Path] = []
    fresh: list[LogSegment] = []
    try:
        for segment in replaced:
            deleted.extend(segment.rename_files_to_deleted())
        for group in groups:
            if group.new_base is not None:
                _install_cleaned(directory, group.new_base)
        fsync_directory(directory)
        old_by_base = {segment.base_offset: segment for segment in replaced}
        for group in groups:
            if group.new_base is None:
                continue
            segment = _open_cleaned(directory, group.new_base, index_interval_bytes, now_ms)
            fresh.append(segment)
            # Kafka keeps the replaced segments' last-modified time: retention of records
            # without timestamps must not restart at the cleaning.
            modified = [
                old.last_modified_ms
                for base_offset in group.old_bases
                if (old := old_by_base.get(base_offset)) is not None
                and old.last_modified_ms is not None
            ]
            if modified:
                segment.last_modified_ms = max(modified)
        (directory / CLEANER_SWAP_FILE).unlink()
        fsync_directory(directory)
    except (OSError, KafkaStorageError):
        for segment in fresh:
            segment.close()
        raise
    return deleted, fresh


def _open_cleaned(
    directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int
) -> LogSegment:
    segment = LogSegment.open_existing(directory, base_offset, now_ms)
    try:
        try:
            segment.load_indexes()
        except CorruptIndexError as exc:
            # The cleaner wrote them moments ago; rebuilding is the cure all the same.
            log.warning(
                "rebuilding index of cleaned segment dir=%s reason=%r",
                directory,
                str(exc),
            )
            segment.recover(index_interval_bytes)
    except BaseException:
        segment.close()
        raise
    return segment
