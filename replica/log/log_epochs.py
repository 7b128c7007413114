"""The leader-epoch cache of one partition log, kept in step with its batches.

Kafka's ``LeaderEpochFileCache`` as the log uses it: :class:`LogEpochs` holds the
:class:`~replica.replication.leader_epoch_cache.LeaderEpochCache` (leader epoch -> the
first offset it wrote) and changes it with the log. An append starts an entry at the first
offset of a new epoch, a truncation drops the entries from the new log end on (all of them
when it empties the log), retention moves the first entry's start up to the new log start.

Every change bumps :attr:`LogEpochs.version`, which
:class:`~replica.log.log_checkpoints.LogCheckpoints` compares with the version on disk, so
that ``leader-epoch-checkpoint`` is written only when the cache changed; *when* it is
written is the flush's rule (see :mod:`replica.log.log_checkpoints`).

Not thread-safe: the partition log's lock guards every call.
"""

from __future__ import annotations

import logging
from pathlib import Path

from replica.replication.leader_epoch_cache import EpochEntry, LeaderEpochCache

__all__ = ["LogEpochs"]

log = logging.getLogger(__name__)


class LogEpochs:
    """A partition log's leader-epoch cache and its change counter; see the module docstring.

    Not thread-safe.
    """

    def __init__(self, directory: Path, cache: LeaderEpochCache) -> None:
        """Start from ``cache`` as the open rebuilt it for the log in ``directory``."""
        self._directory = directory
        self.cache = cache
        """The cache; change it only through this class, so that :attr:`version` follows."""
        self.version = 0
        """Bumped on every change of the cache; compared with the version on disk."""

    @property
    def latest_epoch(self) -> int:
        """The epoch of the last entry (``UNDEFINED_EPOCH``, -1, if there is none)."""
        return self.cache.latest_epoch

    def check_leader_append(self, leader_epoch: int) -> None:
        """Log a leader append whose epoch is older than the latest one (the caller should
        have fenced that leader); :meth:`assign` then replaces the newer entries, as in
        Kafka, so that the cache still matches the batches."""
        latest_epoch = self.cache.latest_epoch
        if leader_epoch < latest_epoch:
            log.warning(
                "leader append with an epoch older than the log's dir=%s leader_epoch=%d "
                "latest_epoch=%d",
                self._directory,
                leader_epoch,
                latest_epoch,
            )

    def assign(self, epoch: int, start_offset: int) -> None:
        """Note that ``epoch`` has data from ``start_offset`` on; cheap when not new."""
        if self.cache.assign(epoch, start_offset):
            self.version += 1
            log.info(
                "new leader epoch dir=%s epoch=%d start_offset=%d",
                self._directory,
                epoch,
                start_offset,
            )

    def start_moved(self, log_start_offset: int) -> None:
        """The log now starts at ``log_start_offset`` (retention deleted a segment)."""
        if self.cache.truncate_from_start(log_start_offset):
            self.version += 1

    def truncated(self, log_end_offset: int, emptied: bool) -> list[EpochEntry]:
        """The log now ends at ``log_end_offset``; returns the entries removed.

        An ``emptied`` log (truncated below its start, restarting at ``log_end_offset``)
        keeps no history: Kafka clears the cache.
        """
        if emptied:
            removed = self.cache.entries
            self.cache.clear()
        else:
            removed = self.cache.truncate_from_end(log_end_offset)
        if removed:
            self.version += 1
        return removed
