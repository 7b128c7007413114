"""Broker lifecycle decisions: registration, heartbeats, fencing, controlled shutdown."""

from __future__ import annotations

import uuid

import pytest

from controller.logic import (
    BrokerHeartbeatManager,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResult,
    BrokerIdNotRegisteredError,
    BrokerRegistrationRequest,
    Decision,
    DuplicateBrokerRegistrationError,
    StaleBrokerEpochError,
    broker_heartbeat,
    controlled_shutdown,
    fence_brokers,
    fence_expired_brokers,
    granted_session_ms,
    record_heartbeat_contact,
    register_broker,
    unregister_broker,
)
from lograft.metadata import (
    NO_LEADER,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    Listener,
    MetadataImage,
    PartitionChangeRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from lograft.protocol.errors import InvalidRequestError
from lograft.protocol.topic_partition import TopicPartition
from tests.unit.controller_fixtures import Cluster

LISTENERS = (Listener("PLAINTEXT", "127.0.0.1", 9092),)


def _cluster(brokers: int = 3) -> Cluster:
    cluster = Cluster(seed=5)
    for broker_id in range(brokers):
        cluster.register(broker_id)
    return cluster


def _request(broker_id: int, incarnation: int, port: int = 9092) -> BrokerRegistrationRequest:
    listeners = (Listener("PLAINTEXT", "127.0.0.1", port),)
    return BrokerRegistrationRequest(broker_id, uuid.UUID(int=incarnation), listeners)


# ---- registration ----------------------------------------------------------------------------


def test_registration_starts_fenced_with_a_new_epoch_and_listeners() -> None:
    cluster = Cluster()
    decision = register_broker(cluster.image, _request(1, 10), cluster.heartbeats, cluster.now_ms)
    (record,) = decision.records
    assert isinstance(record, RegisterBrokerRecord) and record.fenced
    assert decision.result.broker_epoch == record.broker_epoch == 1
    cluster.commit(decision)
    broker = cluster.image.brokers[1]
    assert broker.fenced and broker.listeners == LISTENERS
    assert broker.registration_offset == cluster.image.offset
    assert cluster.heartbeats.last_contact_ms(1) == cluster.now_ms


def test_every_registration_gets_a_larger_epoch() -> None:
    cluster = Cluster()
    epochs = []
    for broker_id in (0, 1, 0, 2, 1):
        cluster.now_ms += 9000  # earlier sessions expire, so re-registration is allowed
        epochs.append(cluster.register(broker_id))
    assert epochs == sorted(epochs) and len(set(epochs)) == len(epochs)


def test_retry_of_the_same_incarnation_is_idempotent() -> None:
    cluster = Cluster()
    first = cluster.commit(
        register_broker(cluster.image, _request(1, 10), cluster.heartbeats, cluster.now_ms)
    )
    retry = register_broker(cluster.image, _request(1, 10), cluster.heartbeats, cluster.now_ms)
    assert retry.records == () and retry.result == first
    # Same incarnation, different listeners: a real change, so a new epoch.
    moved = register_broker(
        cluster.image, _request(1, 10, 9999), cluster.heartbeats, cluster.now_ms
    )
    assert moved.result.broker_epoch > first.broker_epoch


def test_new_incarnation_refused_while_the_old_session_is_live() -> None:
    cluster = _cluster(1)
    with pytest.raises(DuplicateBrokerRegistrationError) as info:
        register_broker(cluster.image, _request(0, 99), cluster.heartbeats, cluster.now_ms + 8999)
    assert info.value.code == 101 and not info.value.retriable
    # Once the session expires the new incarnation may register (even before the tick).
    decision = register_broker(
        cluster.image, _request(0, 99), cluster.heartbeats, cluster.now_ms + 9000
    )
    assert decision.result.broker_epoch > cluster.epochs[0]


def test_new_incarnation_of_a_fenced_broker_registers_at_once() -> None:
    cluster = _cluster(1)
    cluster.commit(_fence(cluster, 0))  # e.g. shut down; its session has not expired yet
    decision = register_broker(cluster.image, _request(0, 77), cluster.heartbeats, cluster.now_ms)
    assert decision.records == (
        RegisterBrokerRecord(0, uuid.UUID(int=77), cluster.epochs[0] + 1, LISTENERS),
    )


def test_reregistration_of_an_unfenced_broker_moves_its_leadership_first() -> None:
    cluster = _cluster(2)
    cluster.create("t", 2, 2)
    led_by_0 = cluster.image.partitions_led_by(0)
    cluster.now_ms += 10_000  # old session expired, no tick yet
    cluster.heartbeat(1)
    decision = register_broker(cluster.image, _request(0, 55), cluster.heartbeats, cluster.now_ms)
    assert isinstance(decision.records[-1], RegisterBrokerRecord)
    assert all(isinstance(r, PartitionChangeRecord) for r in decision.records[:-1])
    cluster.commit(decision)
    assert cluster.image.partitions_led_by(0) == []
    for tp in led_by_0:
        assert cluster.state(tp.topic, tp.partition).leader == 1
        assert cluster.state(tp.topic, tp.partition).isr == (1,)


@pytest.mark.parametrize(
    "request_",
    [
        BrokerRegistrationRequest(-1, uuid.UUID(int=1), LISTENERS),
        BrokerRegistrationRequest(1, uuid.UUID(int=1), ()),
        BrokerRegistrationRequest(1, uuid.UUID(int=0), LISTENERS),
        BrokerRegistrationRequest(1, uuid.UUID(int=1), (Listener("P", "h", 0),)),
        BrokerRegistrationRequest(1, uuid.UUID(int=1), (Listener("P", "", 1),)),
        BrokerRegistrationRequest(1, uuid.UUID(int=1), LISTENERS * 2),
    ],
)
def test_malformed_registrations(request_: BrokerRegistrationRequest) -> None:
    with pytest.raises(InvalidRequestError):
        register_broker(MetadataImage.empty(), request_, BrokerHeartbeatManager(), 0)


def test_empty_rack_means_no_rack() -> None:
    cluster = Cluster()
    request = BrokerRegistrationRequest(1, uuid.UUID(int=3), LISTENERS, "")
    cluster.commit(register_broker(cluster.image, request, cluster.heartbeats, 0))
    assert cluster.image.brokers[1].rack is None


# ---- heartbeats and unfencing ----------------------------------------------------------------


def _heartbeat(
    cluster: Cluster, broker_id: int, offset: int, **kw: bool
) -> Decision[BrokerHeartbeatResult]:
    request = BrokerHeartbeatRequest(broker_id, cluster.epochs[broker_id], offset, **kw)
    return broker_heartbeat(cluster.image, request, cluster.heartbeats, cluster.now_ms)


def test_heartbeat_errors() -> None:
    cluster = _cluster(1)
    with pytest.raises(BrokerIdNotRegisteredError) as unknown:
        broker_heartbeat(
            cluster.image, BrokerHeartbeatRequest(7, 1, 0), cluster.heartbeats, cluster.now_ms
        )
    assert unknown.value.code == 102
    with pytest.raises(StaleBrokerEpochError) as stale:
        broker_heartbeat(
            cluster.image,
            BrokerHeartbeatRequest(0, cluster.epochs[0] - 1, 0),
            cluster.heartbeats,
            cluster.now_ms,
        )
    assert stale.value.code == 77


def test_broker_unfenced_only_once_caught_up_with_its_registration() -> None:
    cluster = Cluster()
    cluster.register(4, unfence=False)
    registered_at = cluster.image.brokers[4].registration_offset
    behind = _heartbeat(cluster, 4, registered_at - 1)
    assert behind.records == ()
    assert behind.result == BrokerHeartbeatResult(False, True, False, False)
    caught_up = _heartbeat(cluster, 4, registered_at)
    assert caught_up.records == (UnfenceBrokerRecord(4, cluster.epochs[4]),)
    assert caught_up.result == BrokerHeartbeatResult(True, False, False, False)


def test_heartbeat_renews_the_session() -> None:
    cluster = _cluster(2)
    cluster.now_ms += 5000
    cluster.heartbeat(0)
    assert cluster.heartbeats.last_contact_ms(0) == cluster.now_ms
    cluster.now_ms += 5000
    decision = fence_expired_brokers(cluster.image, cluster.heartbeats, cluster.now_ms)
    assert decision.result == (1,)


# ---- fencing and leader election -------------------------------------------------------------


def test_fencing_after_the_session_timeout_elects_first_live_isr_member() -> None:
    cluster = _cluster(3)
    cluster.create("t", 6, 3)
    before = {p: cluster.state("t", p) for p in range(6)}
    cluster.now_ms += 8999
    cluster.heartbeat(0)
    cluster.heartbeat(2)
    assert fence_expired_brokers(cluster.image, cluster.heartbeats, cluster.now_ms).records == ()
    cluster.now_ms += 1  # 9000 ms since broker 1's last heartbeat: Kafka's default timeout
    decision = fence_expired_brokers(cluster.image, cluster.heartbeats, cluster.now_ms)
    assert decision.result == (1,)
    assert decision.records[0] == FenceBrokerRecord(1, cluster.epochs[1])
    cluster.commit(decision)
    assert cluster.image.brokers[1].fenced
    for p, old in before.items():
        new = cluster.state("t", p)
        assert 1 not in new.isr
        assert new.partition_epoch == old.partition_epoch + 1
        if old.leader == 1:
            expected = next(b for b in old.replicas if b in old.isr and b != 1)
            assert new.leader == expected and new.leader_epoch == old.leader_epoch + 1
        else:
            assert new.leader == old.leader and new.leader_epoch == old.leader_epoch


def test_last_isr_member_stays_and_the_partition_goes_offline() -> None:
    cluster = _cluster(2)
    cluster.create("t", 1, 2)
    leader = cluster.state("t").leader
    other = 1 - leader
    cluster.commit(_fence(cluster, other))
    assert cluster.state("t").isr == (leader,)
    cluster.commit(_fence(cluster, leader))
    state = cluster.state("t")
    assert state.leader == NO_LEADER and state.isr == (leader,)
    assert cluster.image.leaderless_partitions() == [TopicPartition("t", 0)]
    # The other replica comes back: not in the ISR, so the partition stays offline.
    cluster.heartbeat(other)
    assert cluster.state("t").leader == NO_LEADER
    # The last ISR member comes back: it leads again, one epoch later.
    cluster.heartbeat(leader)
    assert cluster.state("t").leader == leader
    assert cluster.state("t").leader_epoch == state.leader_epoch + 1


def _fence(cluster: Cluster, broker_id: int) -> Decision[tuple[int, ...]]:
    return fence_brokers(cluster.image, [broker_id])


def test_unclean_election_takes_a_live_replica_and_is_flagged() -> None:
    cluster = _cluster(2)
    cluster.create("u", 1, 2, {"unclean.leader.election.enable": "true"})
    leader = cluster.state("u").leader
    other = 1 - leader
    cluster.commit(_fence(cluster, other))  # ISR shrinks to the leader
    cluster.commit(_fence(cluster, leader))  # offline
    assert cluster.state("u").leader == NO_LEADER
    decision = _heartbeat(cluster, other, cluster.image.offset)
    assert decision.unclean_elections == (TopicPartition("u", 0),)
    cluster.commit(decision)
    state = cluster.state("u")
    assert state.leader == other and state.isr == (other,)


def test_unclean_election_on_fencing_when_another_replica_is_live() -> None:
    cluster = _cluster(3)
    cluster.create("u", 1, 3, {"unclean.leader.election.enable": "true"})
    replicas = cluster.state("u").replicas
    # Shrink the ISR to the leader by fencing the followers, then bring one back (it does
    # not rejoin the ISR by itself: only the leader's AlterPartition adds it).
    cluster.commit(_fence(cluster, replicas[1]))
    cluster.commit(_fence(cluster, replicas[2]))
    cluster.heartbeat(replicas[1])
    assert cluster.state("u").isr == (replicas[0],)
    decision = _fence(cluster, replicas[0])
    assert decision.unclean_elections == (TopicPartition("u", 0),)
    cluster.commit(decision)
    assert cluster.state("u").leader == replicas[1]


def test_no_unclean_election_by_default() -> None:
    cluster = _cluster(3)
    cluster.create("c", 1, 3)
    replicas = cluster.state("c").replicas
    cluster.commit(_fence(cluster, replicas[1]))
    cluster.commit(_fence(cluster, replicas[2]))
    cluster.heartbeat(replicas[1])
    decision = _fence(cluster, replicas[0])
    assert decision.unclean_elections == ()
    cluster.commit(decision)
    assert cluster.state("c").leader == NO_LEADER


def test_fencing_two_brokers_at_once_moves_each_partition_once() -> None:
    cluster = _cluster(3)
    cluster.create("t", 3, 3)
    before = {p: cluster.state("t", p) for p in range(3)}
    cluster.now_ms += 9000
    cluster.heartbeat(2)
    decision = fence_expired_brokers(cluster.image, cluster.heartbeats, cluster.now_ms)
    assert decision.result == (0, 1)
    changes = [r for r in decision.records if isinstance(r, PartitionChangeRecord)]
    assert len(changes) == 3  # one record per partition
    cluster.commit(decision)
    for p in range(3):
        state = cluster.state("t", p)
        assert state.leader == 2 and state.isr == (2,)
        assert state.partition_epoch == before[p].partition_epoch + 1


def test_new_controller_gives_every_broker_a_fresh_session() -> None:
    cluster = _cluster(2)
    fresh = BrokerHeartbeatManager()
    late = cluster.now_ms + 60_000
    assert fence_expired_brokers(cluster.image, fresh, late).records == ()
    assert fence_expired_brokers(cluster.image, fresh, late + 8999).records == ()
    assert fence_expired_brokers(cluster.image, fresh, late + 9000).result == (0, 1)


def test_the_next_expiry_is_the_first_unfenced_session_to_run_out() -> None:
    """What the active controller's fencer sleeps until: the earliest session end of an
    unfenced broker, moved later by heartbeats; none for brokers never heard from."""
    cluster = _cluster(3)
    fresh = BrokerHeartbeatManager(9000)
    assert fresh.next_expiry_ms(cluster.image) is None
    fresh.touch(0, 1000)
    fresh.touch(1, 500)
    fresh.touch(2, 2000)
    assert fresh.next_expiry_ms(cluster.image) == 9500
    fresh.touch(1, 3000)
    assert fresh.next_expiry_ms(cluster.image) == 10_000
    assert fence_expired_brokers(cluster.image, fresh, 9_999).records == ()
    assert fence_expired_brokers(cluster.image, fresh, 10_000).result == (0,)


def test_want_fence() -> None:
    cluster = _cluster(2)
    cluster.create("t", 2, 2)
    decision = _heartbeat(cluster, 0, cluster.image.offset, want_fence=True)
    cluster.commit(decision)
    assert cluster.image.brokers[0].fenced and cluster.image.partitions_led_by(0) == []
    # A fenced broker that wants to stay fenced is not unfenced.
    assert _heartbeat(cluster, 0, cluster.image.offset, want_fence=True).records == ()


# ---- controlled shutdown ---------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_then_fences() -> None:
    cluster = _cluster(3)
    cluster.create("t", 6, 2)
    cluster.create("solo", 3, 1)
    led = cluster.image.partitions_led_by(1)
    first = controlled_shutdown(cluster.image, 1, cluster.epochs[1], True)
    assert first.records[0] == BrokerRegistrationChangeRecord(
        1, cluster.epochs[1], in_controlled_shutdown=True
    )
    assert first.result == BrokerHeartbeatResult(True, False, True, False)
    assert first.unclean_elections == ()
    cluster.commit(first)
    assert cluster.image.brokers[1].in_controlled_shutdown
    assert cluster.image.partitions_led_by(1) == []
    for tp in led:
        state = cluster.state(tp.topic, tp.partition)
        if len(state.replicas) == 1:
            # The only replica: offline, never elected elsewhere, ISR kept.
            assert state.leader == NO_LEADER and state.isr == (1,)
        else:
            assert state.leader != 1 and state.isr == tuple(b for b in state.replicas if b != 1)
    for _, _, state in cluster.image.iter_partitions():
        assert 1 not in state.isr or state.isr == (1,)
    second = controlled_shutdown(cluster.image, 1, cluster.epochs[1], True)
    assert second.records == (FenceBrokerRecord(1, cluster.epochs[1]),)
    assert second.result.should_shut_down and second.result.is_fenced
    cluster.commit(second)
    assert cluster.image.brokers[1].fenced
    # Once fenced, the answer is "shut down" with nothing to append.
    third = controlled_shutdown(cluster.image, 1, cluster.epochs[1], True)
    assert third.records == () and third.result.should_shut_down


def test_controlled_shutdown_via_heartbeat_and_no_new_leadership_meanwhile() -> None:
    cluster = _cluster(2)
    cluster.create("t", 2, 2)
    cluster.heartbeat(0, want_shut_down=True)
    assert cluster.image.partitions_led_by(0) == []
    # Broker 1 leaves too: broker 0 is shutting down, so it is not elected.
    cluster.commit(_fence(cluster, 1))
    assert cluster.image.leaderless_partitions() == [TopicPartition("t", 0), TopicPartition("t", 1)]
    # A plain heartbeat does not cancel the shutdown.
    result = _heartbeat(cluster, 0, cluster.image.offset)
    assert result.records == ()
    assert result.result.in_controlled_shutdown


# ---- unregistration --------------------------------------------------------------------------


def test_unregister_broker() -> None:
    cluster = _cluster(2)
    cluster.create("t", 2, 2)
    with pytest.raises(BrokerIdNotRegisteredError):
        unregister_broker(cluster.image, 9, cluster.heartbeats)
    decision = unregister_broker(cluster.image, 0, cluster.heartbeats)
    assert decision.records[-1] == UnregisterBrokerRecord(0, cluster.epochs[0])
    cluster.commit(decision)
    assert 0 not in cluster.image.brokers and cluster.image.partitions_led_by(0) == []
    assert cluster.heartbeats.last_contact_ms(0) is None


def test_a_heartbeat_renews_the_session_when_it_arrives_not_when_it_is_decided() -> None:
    cluster = _cluster(2)
    arrived_ms = cluster.now_ms + 5000
    # Broker 0's heartbeat arrives while the controller waits for a slow commit...
    assert record_heartbeat_contact(
        cluster.image, 0, cluster.epochs[0], cluster.heartbeats, arrived_ms
    )
    # ...and the session check that runs after that commit, past the timeout since the
    # brokers' last decided heartbeats, fences broker 1 only.
    cluster.now_ms += 10_000  # the session timeout is 9 s
    decision = fence_expired_brokers(cluster.image, cluster.heartbeats, cluster.now_ms)
    assert decision.result == (1,)


def test_only_the_current_incarnation_renews_a_session_on_arrival() -> None:
    cluster = _cluster(2)
    later_ms = cluster.now_ms + 5000
    assert not record_heartbeat_contact(
        cluster.image, 0, cluster.epochs[0] - 1, cluster.heartbeats, later_ms
    )
    assert not record_heartbeat_contact(cluster.image, 7, 1, cluster.heartbeats, later_ms)
    assert cluster.heartbeats.last_contact_ms(0) != later_ms


def test_a_heartbeat_grants_its_session_as_the_brokers_lease_only_while_it_may_lead() -> None:
    cluster = _cluster(2)
    session_ms = cluster.heartbeats.session_timeout_ms
    registered_at = cluster.image.brokers[0].registration_offset
    unfenced = _heartbeat(cluster, 0, registered_at)
    assert granted_session_ms(True, unfenced.result, cluster.heartbeats) == session_ms
    # Not renewed on arrival (the controller was not active yet, or another incarnation).
    assert granted_session_ms(False, unfenced.result, cluster.heartbeats) == 0
    # Fenced, or on its way out after a controlled shutdown: it leads nothing.
    cluster.commit(fence_brokers(cluster.image, [1]))
    fenced = _heartbeat(cluster, 1, 0)
    assert fenced.result.is_fenced
    assert granted_session_ms(True, fenced.result, cluster.heartbeats) == 0
    leaving = _heartbeat(cluster, 0, registered_at, want_shut_down=True)
    assert leaving.result.in_controlled_shutdown
    assert granted_session_ms(True, leaving.result, cluster.heartbeats) == 0
