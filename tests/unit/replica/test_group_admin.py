"""Server pieces of the consumer-group admin calls: members' hosts (recorded, described,
persisted; version-1 records still read), the admin commit refused while members are active,
and how a gRPC peer becomes Kafka's host string."""

from __future__ import annotations

import logging
import random
import struct

import pytest

from lograft.protocol.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    UnknownMemberIdError,
)
from lograft.protocol.topic_partition import TopicPartition
from replica.group import (
    GroupCoordinator,
    GroupLoggers,
    GroupRecord,
    MemberMetadataKey,
    MemberMetadataValue,
    OffsetAndMetadata,
    OffsetCommitKey,
    decode,
    encode,
    encode_key,
)
from replica.group_rpcs import _client_host

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)
GROUP_LOGGERS = GroupLoggers(CORE_LOG, CORE_LOG, CORE_LOG)


def _active() -> GroupCoordinator:
    coordinator = GroupCoordinator(random.Random(1), loggers=GROUP_LOGGERS)
    coordinator.replay([])
    coordinator.complete_load({"t": 2}, 0)
    return coordinator


def _join(coordinator: GroupCoordinator, host: str | None) -> str:
    result = coordinator.heartbeat(
        "g",
        "",
        0,
        now_ms=0,
        rebalance_timeout_ms=1000,
        subscribed_topics=["t"],
        client_id="app",
        client_host=host,
    )
    return result.member_id


def test_a_members_host_is_described_and_survives_a_replay() -> None:
    coordinator = _active()
    _join(coordinator, "/10.0.0.7")
    (member,) = coordinator.describe("g").members
    assert (member.client_id, member.client_host) == ("app", "/10.0.0.7")
    reloaded = GroupCoordinator(random.Random(2), loggers=GROUP_LOGGERS)
    reloaded.replay(decode(*encode(r)) for r in coordinator.snapshot())
    reloaded.complete_load({"t": 2}, 0)
    assert reloaded.describe("g").members[0].client_host == "/10.0.0.7"


def test_member_metadata_of_version_1_is_read_without_a_host() -> None:
    def s(text: str) -> bytes:
        return struct.pack(">H", len(text)) + text.encode()

    v1 = (
        struct.pack(">H", 1)
        + s("app")
        + struct.pack(">I", 1)
        + s("t")
        + s("range")
        + struct.pack(">ii", 300_000, 45_000)
    )
    key = encode_key(MemberMetadataKey("g", "m"))
    assert decode(key, v1) == GroupRecord(
        MemberMetadataKey("g", "m"), MemberMetadataValue("app", ("t",), "range", 300_000, 45_000)
    )


def test_an_admin_commit_while_members_are_active_is_unknown_member_id_with_a_hint() -> None:
    coordinator = _active()
    _join(coordinator, None)
    with pytest.raises(UnknownMemberIdError, match="stop its consumers first"):
        coordinator.commit_offsets("g", "", -1, {TopicPartition("t", 0): OffsetAndMetadata(0)}, 0)


def test_an_admin_commit_creates_a_group_that_does_not_exist() -> None:
    coordinator = _active()
    tp = TopicPartition("t", 1)
    result = coordinator.commit_offsets("fresh", "", -1, {tp: OffsetAndMetadata(5)}, 0)
    assert result.errors == {tp: None}
    assert coordinator.describe("fresh").state.value == "Empty"
    assert coordinator.fetch_offsets("fresh")[tp].offset == 5  # type: ignore[union-attr]


def test_offsets_are_deleted_only_for_topics_no_member_subscribes_to() -> None:
    coordinator = _active()
    old, used = TopicPartition("old", 0), TopicPartition("t", 0)
    coordinator.on_topic_metadata({"t": 2, "old": 1})
    coordinator.commit_offsets(
        "g", "", -1, {old: OffsetAndMetadata(3), used: OffsetAndMetadata(4)}, 0
    )
    _join(coordinator, None)  # subscribes to "t"
    result = coordinator.delete_offsets("g", [old, used])
    assert result.errors[old] is None
    assert isinstance(result.errors[used], GroupSubscribedToTopicError)
    assert [(r.key, r.tombstone) for r in result.records] == [
        (OffsetCommitKey("g", "old", 0), True)
    ]
    assert set(coordinator.fetch_offsets("g")) == {used}, "the offset in use stays"
    with pytest.raises(GroupIdNotFoundError):
        coordinator.delete_offsets("nope", [old])


class _Context:
    def __init__(self, peer: object) -> None:
        self._peer = peer

    def peer(self) -> object:
        return self._peer


@pytest.mark.parametrize(
    ("peer", "host"),
    [
        ("ipv4:127.0.0.1:50312", "/127.0.0.1"),
        ("ipv6:[::1]:50312", "/::1"),
        ("ipv6:%5B::1%5D:50312", "/::1"),
        ("unix:/tmp/socket", None),
        (None, None),
    ],
)
def test_peers_become_kafka_host_strings(peer: object, host: str | None) -> None:
    assert _client_host(_Context(peer)) == host  # type: ignore[arg-type]
