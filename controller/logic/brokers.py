"""Broker lifecycle: registration, heartbeats, fencing, controlled shutdown, removal.

State of a broker in the image, and what moves it (Kafka's KIP-631 lifecycle)::

    (none) --register--> fenced --heartbeat, caught up--> unfenced (active)
    unfenced --no heartbeat for broker.session.timeout.ms (tick)--> fenced
    unfenced --heartbeat want_fence--> fenced
    unfenced --heartbeat want_shut_down--> in controlled shutdown (leadership moved away)
    in controlled shutdown --heartbeat want_shut_down, leads nothing--> fenced, shut down
    fenced --heartbeat, caught up--> unfenced
    any --register with a new incarnation--> fenced (new broker epoch)
    any --unregister--> (none)

"Caught up" means the broker's fetched metadata offset has reached the offset of the entry
that registered it, so it has seen its own registration and everything before it.

Heartbeat times are not metadata: like Kafka's ``BrokerHeartbeatManager`` they live only
in the active controller's memory (:class:`BrokerHeartbeatManager`). A newly active
controller starts every broker's session afresh when it first sees it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from controller.logic._planner import PartitionPlanner
from controller.logic.decision import DEFAULT_CONFIG, Decision
from lograft.metadata.image import BrokerRegistration, MetadataImage
from lograft.metadata.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    Listener,
    MetadataRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from lograft.protocol.errors import (
    BrokerIdNotRegisteredError,
    DuplicateBrokerRegistrationError,
    InvalidRequestError,
    StaleBrokerEpochError,
)
from lograft.protocol.topic_partition import TopicPartition

__all__ = [
    "BrokerHeartbeatManager",
    "BrokerHeartbeatRequest",
    "BrokerHeartbeatResult",
    "BrokerRegistrationRequest",
    "BrokerRegistrationResult",
    "broker_heartbeat",
    "check_broker_epoch",
    "controlled_shutdown",
    "fence_brokers",
    "fence_expired_brokers",
    "granted_session_ms",
    "record_heartbeat_contact",
    "register_broker",
    "unregister_broker",
]


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    """A broker process asks to join: its id, a random id of this process, its addresses."""

    broker_id: int
    incarnation_id: uuid.UUID
    listeners: tuple[Listener, ...]
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResult:
    """The broker epoch to send with every later request of this incarnation."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    """A periodic heartbeat; ``current_metadata_offset`` is how far the broker has replayed."""

    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool = False
    want_shut_down: bool = False


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResult:
    """The broker's state once the decision's records are committed."""

    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class BrokerHeartbeatManager:
    """Last heartbeat time of each broker, on the active controller only (not in the log).

    Pure: times come in as ``now_ms``. Not thread-safe.
    """

    def __init__(self, session_timeout_ms: int = DEFAULT_CONFIG.broker_session_timeout_ms) -> None:
        if session_timeout_ms <= 0:
            raise ValueError(f"broker.session.timeout.ms must be > 0, got {session_timeout_ms}")
        self.session_timeout_ms = session_timeout_ms
        self._last_contact_ms: dict[int, int] = {}

    def touch(self, broker_id: int, now_ms: int) -> None:
        """Record contact from a broker at ``now_ms``."""
        previous = self._last_contact_ms.get(broker_id)
        # A heartbeat processed late must not move the session back in time.
        self._last_contact_ms[broker_id] = now_ms if previous is None else max(previous, now_ms)

    def forget(self, broker_id: int) -> None:
        """Drop a broker's session (it was unregistered)."""
        self._last_contact_ms.pop(broker_id, None)

    def last_contact_ms(self, broker_id: int) -> int | None:
        """When the broker was last heard from, or None."""
        return self._last_contact_ms.get(broker_id)

    def _session_end_ms(self, broker_id: int) -> int | None:
        """When the broker's session runs out unless it is heard from again (None: never
        heard from)."""
        last = self._last_contact_ms.get(broker_id)
        return None if last is None else last + self.session_timeout_ms

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        """Heard from within the session timeout."""
        end = self._session_end_ms(broker_id)
        return end is not None and now_ms < end

    def next_expiry_ms(self, image: MetadataImage) -> int | None:
        """When the first unfenced broker of the image heard from so far times out, unless
        it is heard from again; None when there is none."""
        ends = [
            end
            for broker in image.unfenced_brokers()
            if (end := self._session_end_ms(broker.broker_id)) is not None
        ]
        return min(ends, default=None)

    def expired_brokers(self, image: MetadataImage, now_ms: int) -> list[int]:
        """Unfenced brokers of the image whose session expired, by id.

        A broker this manager has never heard from gets a session starting now: after a
        controller failover every broker has a full timeout to reach the new controller.
        """
        expired: list[int] = []
        for broker in image.unfenced_brokers():
            if broker.broker_id not in self._last_contact_ms:
                self._last_contact_ms[broker.broker_id] = now_ms
            elif not self.has_valid_session(broker.broker_id, now_ms):
                expired.append(broker.broker_id)
        return expired


def check_broker_epoch(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> BrokerRegistration:
    """The broker's registration; ``STALE_BROKER_EPOCH`` if unknown or of another epoch.

    Kafka's ``checkBrokerEpoch``, used by AlterPartition and AllocateProducerIds.
    """
    broker = image.broker(broker_id)
    if broker is None:
        raise StaleBrokerEpochError(f"broker {broker_id} is not registered")
    if broker.broker_epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"broker {broker_id} epoch {broker_epoch} is not the current {broker.broker_epoch}"
        )
    return broker


def _heartbeating_broker(
    image: MetadataImage, broker_id: int, broker_epoch: int
) -> BrokerRegistration:
    broker = image.broker(broker_id)
    if broker is None:
        raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
    if broker.broker_epoch != broker_epoch:
        raise StaleBrokerEpochError(
            f"broker {broker_id} epoch {broker_epoch} is not the current {broker.broker_epoch}"
        )
    return broker


def _check_registration_request(request: BrokerRegistrationRequest) -> str | None:
    if request.broker_id < 0:
        raise InvalidRequestError(f"broker id {request.broker_id} must be >= 0")
    if not request.listeners:
        raise InvalidRequestError("a broker must register at least one listener")
    names = [listener.name for listener in request.listeners]
    if len(set(names)) != len(names):
        raise InvalidRequestError(f"listener names {names} must be distinct")
    for listener in request.listeners:
        if not listener.host or not 0 < listener.port < 65536:
            raise InvalidRequestError(f"listener {listener} needs a host and a port 1..65535")
    if request.incarnation_id.int == 0:
        raise InvalidRequestError("incarnation id must not be zero")
    # Kafka treats an empty rack as no rack.
    return request.rack or None


def register_broker(
    image: MetadataImage,
    request: BrokerRegistrationRequest,
    heartbeats: BrokerHeartbeatManager,
    now_ms: int,
) -> Decision[BrokerRegistrationResult]:
    """Register a broker incarnation; it starts fenced with a new, larger broker epoch.

    A retry of this incarnation's registration returns its epoch again with no records. A
    different incarnation of an unfenced broker whose session is live is refused with
    ``DUPLICATE_BROKER_REGISTRATION`` (two processes with one id, or a restart faster than
    the session timeout: the new process retries until the old session expires). If the old
    incarnation is still unfenced, leadership and ISR membership move away from it first.
    Starts the broker's heartbeat session.
    """
    rack = _check_registration_request(request)
    existing = image.broker(request.broker_id)
    if existing is not None and existing.incarnation_id == request.incarnation_id:
        if existing.listeners == request.listeners and existing.rack == rack:
            heartbeats.touch(request.broker_id, now_ms)
            return Decision((), BrokerRegistrationResult(request.broker_id, existing.broker_epoch))
    elif (
        existing is not None
        and not existing.fenced
        and heartbeats.has_valid_session(request.broker_id, now_ms)
    ):
        raise DuplicateBrokerRegistrationError(
            f"broker {request.broker_id} is registered by incarnation {existing.incarnation_id} "
            f"whose session is live"
        )
    records: list[MetadataRecord] = []
    unclean: tuple[TopicPartition, ...] = ()
    if existing is not None and not existing.fenced:
        planner = PartitionPlanner(image)
        planner.remove_broker(request.broker_id)
        records.extend(planner.records())
        unclean = planner.unclean_elections()
    epoch = image.last_broker_epoch + 1
    records.append(
        RegisterBrokerRecord(
            broker_id=request.broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=epoch,
            listeners=request.listeners,
            rack=rack,
            fenced=True,
            in_controlled_shutdown=False,
        )
    )
    heartbeats.touch(request.broker_id, now_ms)
    return Decision(tuple(records), BrokerRegistrationResult(request.broker_id, epoch), unclean)


def record_heartbeat_contact(
    image: MetadataImage,
    broker_id: int,
    broker_epoch: int,
    heartbeats: BrokerHeartbeatManager,
    now_ms: int,
) -> bool:
    """A heartbeat arrived: renew the session of the broker it names, before it is decided.

    The active controller decides one thing at a time and each decision waits for its
    records to commit; a heartbeat queued behind slow commits is decided seconds after it
    arrived, and a session renewed only then expires while the broker is alive (Kafka's
    KAFKA-15019, KAFKA-17793: the contact time is recorded on arrival). Only the current
    incarnation's epoch renews a session. Returns whether it did.
    """
    try:
        _heartbeating_broker(image, broker_id, broker_epoch)
    except (BrokerIdNotRegisteredError, StaleBrokerEpochError):
        return False  # the decision answers it with that error
    heartbeats.touch(broker_id, now_ms)
    return True


def granted_session_ms(
    renewed: bool, result: BrokerHeartbeatResult, heartbeats: BrokerHeartbeatManager
) -> int:
    """The session a heartbeat's answer grants the broker as its lease (0: none): the one
    renewed on its arrival (``renewed``, :func:`record_heartbeat_contact`), provided the
    broker is still unfenced and not shutting down once the heartbeat was decided. A fenced
    or departing broker leads nothing, so it is granted nothing to lead by."""
    if not renewed or result.is_fenced or result.in_controlled_shutdown:
        return 0
    return heartbeats.session_timeout_ms


def broker_heartbeat(
    image: MetadataImage,
    request: BrokerHeartbeatRequest,
    heartbeats: BrokerHeartbeatManager,
    now_ms: int,
) -> Decision[BrokerHeartbeatResult]:
    """Process a heartbeat: renew the session, unfence a caught-up broker, or fence on request.

    Raises ``BROKER_ID_NOT_REGISTERED`` for an unknown broker and ``STALE_BROKER_EPOCH`` for
    an old incarnation's epoch. ``want_shut_down`` runs :func:`controlled_shutdown`.
    Unfencing also gives a leader to offline partitions this broker can lead.
    """
    broker = _heartbeating_broker(image, request.broker_id, request.broker_epoch)
    heartbeats.touch(request.broker_id, now_ms)
    caught_up = request.current_metadata_offset >= broker.registration_offset
    if request.want_shut_down:
        return controlled_shutdown(image, request.broker_id, request.broker_epoch, caught_up)
    if broker.in_controlled_shutdown:
        # Kafka cannot cancel a controlled shutdown: the broker stays out until it restarts.
        return Decision((), BrokerHeartbeatResult(caught_up, broker.fenced, True, False))
    if request.want_fence:
        if broker.fenced:
            return Decision((), BrokerHeartbeatResult(caught_up, True, False, False))
        fenced = fence_brokers(image, [broker.broker_id])
        return Decision(
            fenced.records,
            BrokerHeartbeatResult(caught_up, True, False, False),
            fenced.unclean_elections,
        )
    if broker.fenced and caught_up:
        planner = PartitionPlanner(image)
        planner.add_broker(broker.broker_id)
        records: tuple[MetadataRecord, ...] = (
            UnfenceBrokerRecord(broker.broker_id, broker.broker_epoch),
            *planner.records(),
        )
        return Decision(
            records,
            BrokerHeartbeatResult(True, False, False, False),
            planner.unclean_elections(),
        )
    return Decision((), BrokerHeartbeatResult(caught_up, broker.fenced, False, False))


def fence_expired_brokers(
    image: MetadataImage,
    heartbeats: BrokerHeartbeatManager,
    now_ms: int,
) -> Decision[tuple[int, ...]]:
    """The periodic tick: fence every unfenced broker silent for the session timeout.

    Each partition such a broker led gets the first live ISR member (replica order) as
    leader with leader epoch + 1; the broker leaves every ISR it is not the last member of.
    The result lists the fenced broker ids.
    """
    expired = heartbeats.expired_brokers(image, now_ms)
    return fence_brokers(image, expired)


def fence_brokers(image: MetadataImage, broker_ids: Sequence[int]) -> Decision[tuple[int, ...]]:
    """Fence the given unfenced brokers now (records, result: the ids fenced)."""
    planner = PartitionPlanner(image)
    records: list[MetadataRecord] = []
    fenced: list[int] = []
    for broker_id in broker_ids:
        broker = image.broker(broker_id)
        if broker is None or broker.fenced:
            continue
        planner.remove_broker(broker_id)
        records.append(FenceBrokerRecord(broker_id, broker.broker_epoch))
        fenced.append(broker_id)
    records.extend(planner.records())
    return Decision(tuple(records), tuple(fenced), planner.unclean_elections())


def controlled_shutdown(
    image: MetadataImage, broker_id: int, broker_epoch: int, caught_up: bool = True
) -> Decision[BrokerHeartbeatResult]:
    """A broker asks to shut down cleanly (heartbeat with ``want_shut_down``).

    First call: the broker is marked in controlled shutdown, every partition it leads moves
    to another live ISR member (or goes offline if it was the only one: a controlled
    shutdown never elects uncleanly), and it leaves every ISR it is not the last member of.
    Once that is committed and it leads nothing, the next call fences it and answers
    ``should_shut_down``. A fenced broker may shut down at once.
    """
    broker = _heartbeating_broker(image, broker_id, broker_epoch)
    if broker.fenced:
        return Decision(
            (), BrokerHeartbeatResult(caught_up, True, broker.in_controlled_shutdown, True)
        )
    planner = PartitionPlanner(image)
    planner.remove_broker(broker_id, allow_unclean=False)
    changes = planner.records()
    if not broker.in_controlled_shutdown:
        records: tuple[MetadataRecord, ...] = (
            BrokerRegistrationChangeRecord(broker_id, broker_epoch, in_controlled_shutdown=True),
            *changes,
        )
        return Decision(records, BrokerHeartbeatResult(caught_up, False, True, False))
    if changes or any(s.leader == broker_id for _, _, s in image.iter_partitions()):
        # Something still depends on this broker (a change not committed yet was
        # superseded): move it again and keep the broker waiting.
        return Decision(tuple(changes), BrokerHeartbeatResult(caught_up, False, True, False))
    return Decision(
        (FenceBrokerRecord(broker_id, broker_epoch),),
        BrokerHeartbeatResult(caught_up, True, True, True),
    )


def unregister_broker(
    image: MetadataImage, broker_id: int, heartbeats: BrokerHeartbeatManager
) -> Decision[None]:
    """Remove a broker from the cluster (Kafka's UnregisterBroker admin request).

    Its partitions are handled as when it is fenced; it stays listed in their replicas.
    """
    broker = image.broker(broker_id)
    if broker is None:
        raise BrokerIdNotRegisteredError(f"broker {broker_id} is not registered")
    planner = PartitionPlanner(image)
    planner.remove_broker(broker_id)
    records: tuple[MetadataRecord, ...] = (
        *planner.records(),
        UnregisterBrokerRecord(broker_id, broker.broker_epoch),
    )
    heartbeats.forget(broker_id)
    return Decision(records, None, planner.unclean_elections())
