"""Kafka's ``LeaderEpochFileCache`` in memory: which leader epoch starts at which offset.

Each entry ``(epoch, start_offset)`` says that the first record written by the leader of
``epoch`` has offset ``start_offset``. Entries are kept with strictly increasing epochs and
strictly increasing start offsets; every mutation re-checks that and raises
:class:`ReplicationInvariantError` if it broke. The cache drives truncation (KIP-101,
KIP-279, KIP-320): a follower sends the epoch of its last record, the leader answers with
:meth:`LeaderEpochCache.end_offset_for`, and the follower truncates to the smaller end.

Persistence is the shell's job: :meth:`LeaderEpochCache.encode` gives the text of Kafka's
``leader-epoch-checkpoint`` file (``version``, ``count``, then ``epoch start_offset`` lines)
and :meth:`LeaderEpochCache.decode` validates it. After loading, the shell calls
:meth:`LeaderEpochCache.truncate_from_end` with the recovered log end offset (and
:meth:`LeaderEpochCache.truncate_from_start` with the log start offset), as Kafka does.

Not thread-safe: owned by one partition on the event loop.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from replica.replication.errors import LeaderEpochCheckpointError, ReplicationInvariantError

__all__ = [
    "CHECKPOINT_VERSION",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "LeaderEpochCache",
]

UNDEFINED_EPOCH = -1
"""Kafka's ``UNDEFINED_EPOCH``: no epoch known (an empty log, or an epoch the cache lacks)."""
UNDEFINED_EPOCH_OFFSET = -1
"""Kafka's ``UNDEFINED_EPOCH_OFFSET``."""
CHECKPOINT_VERSION = 0
"""The format version on the first line of a leader-epoch checkpoint file (Kafka's 0)."""
_MAX_CHECKPOINT_ENTRIES = 1_000_000


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """The leader of ``epoch`` wrote its first record at ``start_offset``."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Answer to OffsetsForLeaderEpoch: the largest epoch <= the one asked and where it ends.

    ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)`` when the cache cannot answer.
    """

    epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        """Whether the cache had no answer."""
        return self.epoch == UNDEFINED_EPOCH and self.end_offset == UNDEFINED_EPOCH_OFFSET


_UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class LeaderEpochCache:
    """Epoch → start offset entries of one partition's log (see the module docstring)."""

    __slots__ = ("_epochs", "_offsets")

    def __init__(self, entries: list[EpochEntry] | None = None) -> None:
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        for entry in entries or []:
            self._epochs.append(entry.epoch)
            self._offsets.append(entry.start_offset)
        self._check()

    # --- reading ---------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        return [EpochEntry(e, o) for e, o in zip(self._epochs, self._offsets, strict=True)]

    def copy(self) -> LeaderEpochCache:
        """An independent copy (the entries are already checked, so this is cheap: a
        follower takes one for every partition of every fetch)."""
        duplicate = LeaderEpochCache()
        duplicate._epochs = self._epochs.copy()
        duplicate._offsets = self._offsets.copy()
        return duplicate

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or ``UNDEFINED_EPOCH`` when empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def earliest_epoch(self) -> int:
        """The oldest epoch, or ``UNDEFINED_EPOCH`` when empty."""
        return self._epochs[0] if self._epochs else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """Where ``epoch`` starts, if the cache has it."""
        index = bisect_left(self._epochs, epoch)
        if index < len(self._epochs) and self._epochs[index] == epoch:
            return self._offsets[index]
        return None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds ``offset`` (``UNDEFINED_EPOCH`` before the first)."""
        index = bisect_right(self._offsets, offset) - 1
        return self._epochs[index] if index >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """KIP-101/KIP-279: the largest epoch <= ``requested_epoch`` and where it ends.

        * the latest epoch ends at the log end offset;
        * an older epoch ends where the next larger epoch in the cache starts, and the
          answer names the largest epoch <= the request (KIP-279: the follower may be asking
          for an epoch this log never had);
        * an epoch below the first entry answers ``(requested_epoch, first start offset)``;
        * an undefined epoch, an empty cache or an epoch above the latest answers
          ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return _UNDEFINED
        if requested_epoch == self._epochs[-1]:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return _UNDEFINED
        if higher == 0:
            return EpochEndOffset(requested_epoch, self._offsets[0])
        return EpochEndOffset(self._epochs[higher - 1], self._offsets[higher])

    # --- changing --------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether anything changed.

        As Kafka: the latest epoch seen again at a later offset changes nothing (an epoch
        starts at its first record). Otherwise every entry with an epoch >= ``epoch`` or a
        start offset >= ``start_offset`` is dropped first (it conflicts: an epoch that wrote
        nothing, or history the caller has truncated), then the entry is added.
        """
        if epoch < 0 or start_offset < 0:
            raise ReplicationInvariantError(
                f"cannot assign epoch={epoch} start_offset={start_offset}: negative"
            )
        if self._epochs and self._epochs[-1] == epoch and start_offset >= self._offsets[-1]:
            return False
        keep = len(self._epochs)
        while keep > 0 and (
            self._epochs[keep - 1] >= epoch or self._offsets[keep - 1] >= start_offset
        ):
            keep -= 1
        del self._epochs[keep:]
        del self._offsets[keep:]
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        self._check()
        return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """The log was truncated to ``end_offset``: drop epochs starting at or after it.

        Returns the removed entries (the shell logs them).
        """
        if end_offset < 0:
            return []
        keep = bisect_left(self._offsets, end_offset)
        removed = self.entries[keep:]
        del self._epochs[keep:]
        del self._offsets[keep:]
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """The log start moved to ``start_offset`` (retention): drop older epochs.

        The epoch covering ``start_offset`` is kept, its start moved up to ``start_offset``
        (Kafka's ``truncateFromStart``). Returns the entries removed or changed.
        """
        covering = bisect_right(self._offsets, start_offset) - 1
        if covering < 0:
            return []
        removed = self.entries[: covering + 1]
        del self._epochs[:covering]
        del self._offsets[:covering]
        self._offsets[0] = start_offset
        self._check()
        if removed[-1] == EpochEntry(self._epochs[0], start_offset):
            removed.pop()
        return removed

    def clear(self) -> None:
        """Forget everything (the log was deleted or truncated fully)."""
        self._epochs.clear()
        self._offsets.clear()

    # --- checkpoint ------------------------------------------------------------------------

    def encode(self) -> str:
        """Kafka's checkpoint text: version, entry count, then ``epoch start_offset`` lines."""
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines += [f"{e} {o}" for e, o in zip(self._epochs, self._offsets, strict=True)]
        return "\n".join(lines) + "\n"

    @classmethod
    def decode(cls, text: str) -> LeaderEpochCache:
        """Parse :meth:`encode`'s text; raises :class:`LeaderEpochCheckpointError` if invalid.

        Checked: the version, the count against the lines present, two non-negative decimal
        integers per line, strictly increasing epochs and start offsets, a final newline and
        nothing after the entries.
        """
        if not text.endswith("\n"):
            raise LeaderEpochCheckpointError("leader-epoch checkpoint does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 2:
            raise LeaderEpochCheckpointError(f"leader-epoch checkpoint too short: {text!r:.80}")
        version = _parse_int(lines[0], "version")
        if version != CHECKPOINT_VERSION:
            raise LeaderEpochCheckpointError(
                f"unsupported leader-epoch checkpoint version {version}"
            )
        count = _parse_int(lines[1], "entry count")
        if count > _MAX_CHECKPOINT_ENTRIES or count != len(lines) - 2:
            raise LeaderEpochCheckpointError(
                f"leader-epoch checkpoint says {count} entries but has {len(lines) - 2}"
            )
        entries: list[EpochEntry] = []
        for number, line in enumerate(lines[2:], start=3):
            fields = line.split(" ")
            if len(fields) != 2:
                raise LeaderEpochCheckpointError(
                    f"line {number}: expected 'epoch offset': {line!r:.80}"
                )
            entries.append(
                EpochEntry(_parse_int(fields[0], "epoch"), _parse_int(fields[1], "start offset"))
            )
        try:
            return cls(entries)
        except ReplicationInvariantError as exc:
            raise LeaderEpochCheckpointError(str(exc)) from exc

    # --- helpers ---------------------------------------------------------------------------

    def _check(self) -> None:
        epochs, offsets = self._epochs, self._offsets
        for i in range(len(epochs)):
            if epochs[i] < 0 or offsets[i] < 0:
                raise ReplicationInvariantError(f"negative entry in leader-epoch cache {self!r}")
            if i and (epochs[i] <= epochs[i - 1] or offsets[i] <= offsets[i - 1]):
                raise ReplicationInvariantError(f"leader-epoch cache out of order: {self!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LeaderEpochCache):
            return NotImplemented
        return self._epochs == other._epochs and self._offsets == other._offsets

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        pairs = ", ".join(f"{e}:{o}" for e, o in zip(self._epochs, self._offsets, strict=True))
        return f"LeaderEpochCache([{pairs}])"


def _parse_int(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise LeaderEpochCheckpointError(
            f"leader-epoch checkpoint {what} is not a number: {text!r:.40}"
        )
    return int(text)
