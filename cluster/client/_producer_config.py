"""The configuration of ``Producer`` (Kafka's ``ProducerConfig``): names, defaults, validation.

``ProducerConfig`` and ``PRODUCER_CONFIGS`` (its table) are re-exported by
:mod:`cluster.client.producer`, their public home.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from lograft.protocol.compression import CompressionType
from lograft.protocol.errors import InvalidConfigError

from ._client_config import (
    ClientConfig,
    ConfigDef,
    boolean,
    int_at_least,
    optional_string,
    setting,
)
from ._sequencing import MAX_IN_FLIGHT

__all__ = ["PRODUCER_CONFIGS", "ProducerConfig", "resolve_idempotence"]

logger = logging.getLogger("cluster.client.producer")
"""The producer's logger: the idempotence decision is logged under the producer's name."""


def _acks(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("acks must be 0, 1, -1 or 'all'")
    text = str(value).strip().lower()
    mapping = {"all": -1, "-1": -1, "1": 1, "0": 0}
    if text not in mapping:
        raise ValueError("acks must be 0, 1, -1 or 'all'")
    return mapping[text]


def _compression(value: object) -> int:
    if not isinstance(value, str):
        raise ValueError("compression.type must be none, gzip, snappy, lz4 or zstd")
    return int(CompressionType.from_name(value))


@dataclass(frozen=True, slots=True)
class ProducerConfig(ClientConfig):
    """Every config ``Producer`` accepts, parsed, with its default. ``compression_type`` is
    the codec id; ``enable_idempotence``, once a producer resolved it, whether the producer
    really is idempotent."""

    KIND: ClassVar[str] = "producer"

    acks: int = setting("acks", -1, _acks, "0: no acknowledgement, 1: leader, all (-1): every ISR")
    linger_ms: int = setting("linger.ms", 5, int_at_least(0), "wait this long for a batch to fill")
    # Kafka's default is 16 KiB. A partition has at most five batches in flight
    # (idempotence), so batch.size bounds what one partition moves per round trip; batches
    # are not preallocated here, so a large value costs no memory until records fill it.
    # Half of a consumer's max.partition.fetch.bytes (1 MiB): a fetch still carries two
    # batches, where 1 MB batches left one per fetch and cut a consumer's rate by a fifth
    # (docs/for-kafka-users.md, issue 15).
    batch_size: int = setting("batch.size", 524_288, int_at_least(0), "bytes per partition batch")
    compression_type: int = setting(
        "compression.type",
        0,
        _compression,
        "none, gzip, snappy, lz4 or zstd",
    )
    max_request_size: int = setting(
        "max.request.size",
        1048576,
        int_at_least(1),
        "largest request (record bytes)",
    )
    delivery_timeout_ms: int = setting(
        "delivery.timeout.ms",
        120000,
        int_at_least(1),
        "give up on a record after this long",
    )
    retries: int = setting(
        "retries",
        2147483647,
        int_at_least(0),
        "resend a failed batch this often",
    )
    max_in_flight_requests_per_connection: int = setting(
        "max.in.flight.requests.per.connection",
        5,
        int_at_least(1),
        "unanswered requests per broker",
    )
    max_block_ms: int = setting("max.block.ms", 60000, int_at_least(0), "longest a send blocks")
    buffer_memory: int = setting(
        "buffer.memory",
        33554432,
        int_at_least(1),
        "bytes waiting to be sent",
    )
    enable_idempotence: bool = setting(
        "enable.idempotence",
        True,
        boolean,
        "write each record once and in order despite retries (producer id and batch "
        "sequences); needs acks=all, retries > 0 and at most 5 requests in flight. Left "
        "unset, an incompatible setting turns it off; set to true, it is an error",
    )
    transactional_id: str | None = setting(
        "transactional.id",
        None,
        optional_string,
        "makes the producer transactional (init_transactions, begin/commit/abort_transaction); "
        "a newer producer with the same id fences this one. Needs idempotence",
    )
    transaction_timeout_ms: int = setting(
        "transaction.timeout.ms",
        60000,
        int_at_least(1),
        "the coordinator aborts a transaction left open longer than this",
    )
    transaction_two_phase_commit_enable: bool = setting(
        "transaction.two.phase.commit.enable",
        False,
        boolean,
        "KIP-939: take part in two-phase commit (prepare_transaction, complete_transaction); "
        "the transaction is never timed out",
    )


PRODUCER_CONFIGS: tuple[ConfigDef[Any], ...] = ProducerConfig.definitions()
"""Every config ``Producer`` accepts, with its default (the table of ``ProducerConfig``)."""


def resolve_idempotence(config: ProducerConfig, explicit: bool) -> bool:
    """Whether the producer is idempotent, as Kafka 3.2+ decides it.

    Idempotence needs ``acks=all``, ``retries`` > 0 and at most five requests in flight.
    Left at its default it is quietly turned off by an incompatible setting; set to true
    explicitly, the conflict raises ``InvalidConfigError``.
    """
    if not config.enable_idempotence:
        return False
    conflicts: list[str] = []
    if config.acks != -1:
        conflicts.append(f"acks=all (not {config.acks})")
    if config.retries == 0:
        conflicts.append("retries > 0")
    max_in_flight = config.max_in_flight_requests_per_connection
    if max_in_flight > MAX_IN_FLIGHT:
        conflicts.append(
            f"max.in.flight.requests.per.connection <= {MAX_IN_FLIGHT} (not {max_in_flight})"
        )
    if not conflicts:
        return True
    if explicit:
        raise InvalidConfigError(
            "producer config enable.idempotence=true needs " + ", ".join(conflicts)
        )
    logger.debug("idempotence turned off conflicts=%s", ";".join(conflicts))
    return False
