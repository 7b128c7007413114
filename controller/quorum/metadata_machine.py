"""The metadata log's state machine: committed entries replayed into a ``MetadataImage``.

Every node has one (controllers and brokers alike). Listeners are told after each applied
batch, with the image before and after, so a broker can create and delete partition logs and
a controller can notice it caught up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from controller.raft import Entry, EntryKind, Snapshot
from lograft.metadata import MetadataDelta, MetadataImage, decode_batch, decode_snapshot
from lograft.metadata import encode_snapshot as encode_image

__all__ = ["ImageListener", "MetadataStateMachine"]

log = logging.getLogger(__name__)

ImageListener = Callable[[MetadataImage, MetadataImage], None]
"""Called with (previous image, new image) after every change."""

SNAPSHOT_EVERY_ENTRIES = 1000
SNAPSHOT_EVERY_BYTES = 20 * 1024 * 1024
"""Kafka's ``metadata.log.max.record.bytes.between.snapshots`` default."""


class MetadataStateMachine:
    """Replays committed metadata entries; hands out snapshots every so many entries."""

    def __init__(
        self,
        snapshot_every_entries: int = SNAPSHOT_EVERY_ENTRIES,
        snapshot_every_bytes: int = SNAPSHOT_EVERY_BYTES,
    ) -> None:
        self.image = MetadataImage.empty()
        self.leader_change_offsets: list[tuple[int, int]] = []
        """(offset, epoch) of the most recent leader-change entries applied."""
        self._listeners: list[ImageListener] = []
        self._snapshot_every = snapshot_every_entries
        self._snapshot_every_bytes = snapshot_every_bytes
        self._applied_since_snapshot = 0
        self._bytes_since_snapshot = 0

    @property
    def applied_end_offset(self) -> int:
        """One past the last entry replayed into the image."""
        return self.image.offset + 1

    def add_listener(self, listener: ImageListener) -> None:
        """Call ``listener`` after every change of the image."""
        self._listeners.append(listener)

    def apply(self, entries: Sequence[Entry]) -> None:
        """Replay committed entries (all of one ``Ready``) as one image change."""
        previous = self.image
        delta = MetadataDelta(previous)
        for entry in entries:
            delta.advance(entry.offset, entry.epoch)
            if entry.kind is EntryKind.DATA:
                for record in decode_batch(entry.data):
                    delta.replay(record, entry.offset, entry.epoch)
            else:
                self.leader_change_offsets = [(entry.offset, entry.epoch)]
        self.image = delta.apply()
        self._applied_since_snapshot += len(entries)
        self._bytes_since_snapshot += sum(len(e.data) for e in entries)
        self._publish(previous)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the image with a snapshot installed from the leader (or found on disk)."""
        previous = self.image
        self.image = decode_snapshot(snapshot.image)
        self._applied_since_snapshot = 0
        self._bytes_since_snapshot = 0
        log.info(
            "metadata image restored from snapshot end_offset=%d epoch=%d",
            snapshot.end_offset,
            snapshot.epoch,
        )
        self._publish(previous)

    def snapshot_image(self) -> tuple[int, bytes] | None:
        """``(end_offset, image bytes)`` once enough entries were applied since the last."""
        due = (
            self._applied_since_snapshot >= self._snapshot_every
            or self._bytes_since_snapshot >= self._snapshot_every_bytes
        )
        if not due or self.image.offset < 0:
            return None
        self._applied_since_snapshot = 0
        self._bytes_since_snapshot = 0
        return self.applied_end_offset, encode_image(self.image)

    def _publish(self, previous: MetadataImage) -> None:
        for listener in self._listeners:
            listener(previous, self.image)
