"""Values exchanged between the follower and leader cores of one partition.

Frozen dataclasses with slots: the shells turn them into the gRPC ``ReplicaFetch``
messages and back. ``R`` is whatever the shell reads from its log: raw RecordBatch bytes
in the broker, lists of entries in the simulation; the cores never look inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from lograft.protocol.errors import LograftError
from replica.replication.leader_epoch_cache import EpochEndOffset

__all__ = ["FetchRequest", "FetchResponse", "IsrProposal"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """A follower asks its leader for records from ``fetch_offset`` (its log end offset).

    ``current_leader_epoch`` is the epoch the follower believes the leader has (KIP-320
    fencing); ``last_fetched_epoch`` the epoch of its last record (KIP-595/KIP-320
    truncation detection), ``UNDEFINED_EPOCH`` for an empty log.
    """

    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse(Generic[R]):
    """The leader's answer to one :class:`FetchRequest` of one partition.

    Exactly one of: ``error`` set; ``diverging_epoch`` set (truncate, nothing else); or
    ``records`` from ``fetch_offset`` up to ``records_end_offset`` (equal when empty).
    ``fetch_offset`` echoes the request so the follower can drop stale or duplicated
    answers.
    """

    leader_epoch: int
    fetch_offset: int
    high_watermark: int
    records: R
    records_end_offset: int
    diverging_epoch: EpochEndOffset | None = None
    error: LograftError | None = None


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An AlterPartition request to send to the controller: the leader's proposed ISR.

    Carries the epochs the leader knows; the controller refuses it if either is stale.
    """

    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
