"""CreateTopics and DeleteTopics decisions."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controller.logic import (
    ControllerConfig,
    NewTopic,
    create_topics,
    delete_topics,
    fence_brokers,
    unclean_leader_election_enabled,
)
from lograft.metadata import (
    ConfigRecord,
    PartitionRecord,
    TopicRecord,
)
from lograft.protocol.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    LograftError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.unit.controller_fixtures import Cluster


def _cluster(brokers: int = 3) -> Cluster:
    cluster = Cluster(seed=11)
    for broker_id in range(brokers):
        cluster.register(broker_id)
    return cluster


def test_create_topic_records_and_state() -> None:
    cluster = _cluster()
    decision = create_topics(
        cluster.image, [NewTopic("orders", 30, 3, {"retention.ms": "1000"})], cluster.rng
    )
    kinds = Counter(type(r) for r in decision.records)
    assert kinds == {TopicRecord: 1, PartitionRecord: 30, ConfigRecord: 1}
    assert decision.records[0] == TopicRecord("orders", decision.result[0].topic_id)  # type: ignore[arg-type]
    result = cluster.commit(decision)[0]
    assert result.error is None and result.topic_id is not None
    assert (result.num_partitions, result.replication_factor) == (30, 3)
    topic = cluster.image.topic("orders")
    assert topic is not None and topic.topic_id == result.topic_id
    for state in topic.partitions.values():
        assert state.isr == state.replicas and state.leader == state.replicas[0]
        assert (state.leader_epoch, state.partition_epoch) == (0, 0)
    assert Counter(s.leader for s in topic.partitions.values()) == {0: 10, 1: 10, 2: 10}
    assert cluster.image.topic_configs("orders") == {"retention.ms": "1000"}


def test_defaults_come_from_the_controller_config() -> None:
    cluster = _cluster()
    config = ControllerConfig(num_partitions=4, default_replication_factor=2)
    result = cluster.commit(
        create_topics(cluster.image, [NewTopic("d")], cluster.rng, config=config)
    )
    assert (result[0].num_partitions, result[0].replication_factor) == (4, 2)
    assert len(cluster.state("d").replicas) == 2


def _error(cluster: Cluster, topic: NewTopic) -> LograftError | None:
    decision = create_topics(cluster.image, [topic], cluster.rng)
    if decision.result[0].error is not None:
        assert decision.records == ()
    return decision.result[0].error


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        (NewTopic("bad name!", 1, 1), InvalidTopicError),
        (NewTopic("", 1, 1), InvalidTopicError),
        (NewTopic("..", 1, 1), InvalidTopicError),
        (NewTopic("exists", 1, 1), TopicAlreadyExistsError),
        (NewTopic("exi.sts", 1, 1), InvalidTopicError),  # collides with "exi_sts"
        (NewTopic("p0", 0, 1), InvalidPartitionsError),
        (NewTopic("p1", 10_001, 1), InvalidPartitionsError),
        (NewTopic("r0", 1, 0), InvalidReplicationFactorError),
        (NewTopic("r4", 1, 4), InvalidReplicationFactorError),
        (NewTopic("c1", 1, 1, {"no.such.config": "1"}), InvalidConfigError),
        (NewTopic("c2", 1, 1, {"retention.ms": "soon"}), InvalidConfigError),
        (NewTopic("c3", 1, 1, {"unclean.leader.election.enable": "maybe"}), InvalidConfigError),
    ],
)
def test_create_topic_errors(topic: NewTopic, error: type[LograftError]) -> None:
    cluster = _cluster()
    cluster.create("exists", 1, 1)
    cluster.create("exi_sts", 1, 1)
    assert isinstance(_error(cluster, topic), error)


def test_replication_factor_counts_only_live_unfenced_brokers() -> None:
    cluster = _cluster(3)
    cluster.commit(fence_brokers(cluster.image, [2]))
    assert isinstance(_error(cluster, NewTopic("t", 1, 3)), InvalidReplicationFactorError)
    cluster.heartbeat(1, want_shut_down=True)  # shutting down: no new replicas either
    assert isinstance(_error(cluster, NewTopic("t", 1, 2)), InvalidReplicationFactorError)
    assert _error(cluster, NewTopic("t", 1, 1)) is None
    topic = cluster.create("t", 5, 1)
    assert {s.leader for s in topic.partitions.values()} == {0}


def test_each_topic_succeeds_or_fails_on_its_own() -> None:
    cluster = _cluster()
    decision = create_topics(
        cluster.image,
        [NewTopic("ok", 2, 2), NewTopic("dup", 1, 1), NewTopic("dup", 1, 1), NewTopic("x!", 1, 1)],
        cluster.rng,
    )
    errors = [type(r.error) if r.error else None for r in decision.result]
    assert errors == [None, InvalidRequestError, InvalidRequestError, InvalidTopicError]
    cluster.commit(decision)
    assert set(cluster.image.topics_by_name) == {"ok"}


def test_names_colliding_within_one_request() -> None:
    cluster = _cluster()
    decision = create_topics(
        cluster.image, [NewTopic("a.b", 1, 1), NewTopic("a_b", 1, 1)], cluster.rng
    )
    assert decision.result[0].error is None
    assert isinstance(decision.result[1].error, InvalidTopicError)


def test_validate_only_appends_nothing() -> None:
    cluster = _cluster()
    decision = create_topics(
        cluster.image, [NewTopic("v", 3, 3), NewTopic("w", 1, 9)], cluster.rng, validate_only=True
    )
    assert decision.records == ()
    assert decision.result[0].error is None and decision.result[0].topic_id is None
    assert isinstance(decision.result[1].error, InvalidReplicationFactorError)


def test_unclean_config_is_accepted_and_read_like_kafka_booleans() -> None:
    cluster = _cluster()
    cluster.create("u", 1, 1, {"unclean.leader.election.enable": " TRUE "})
    cluster.create("v", 1, 1, {"unclean.leader.election.enable": "false"})
    cluster.create("w", 1, 1)
    assert unclean_leader_election_enabled(cluster.image, "u")
    assert not unclean_leader_election_enabled(cluster.image, "v")
    assert not unclean_leader_election_enabled(cluster.image, "w")


def test_topic_ids_are_random_but_seeded() -> None:
    a = create_topics(_cluster().image, [NewTopic("t", 1, 1)], random.Random(5))
    b = create_topics(_cluster().image, [NewTopic("t", 1, 1)], random.Random(5))
    assert a.records == b.records
    assert a.result[0].topic_id is not None and a.result[0].topic_id.version == 4


def test_delete_topics() -> None:
    cluster = _cluster()
    topic = cluster.create("gone", 3, 2, {"retention.ms": "5"})
    decision = delete_topics(cluster.image, ["gone", "never", "gone2", "gone2"])
    errors = [type(r.error) if r.error else None for r in decision.result]
    assert errors == [None, UnknownTopicOrPartitionError, InvalidRequestError, InvalidRequestError]
    assert decision.result[0].topic_id == topic.topic_id
    cluster.commit(decision)
    assert cluster.image.topic("gone") is None and cluster.image.partition_count() == 0
    assert cluster.image.topic_configs("gone") == {}
    # The name can be used again, with a new id and no old configs.
    again = cluster.create("gone", 1, 1)
    assert again.topic_id != topic.topic_id
