"""Consumer-group administration against a real three-node cluster: ``AdminClient``'s group
calls and ``lograft groups`` (Kafka's ``kafka-consumer-groups``), on one cluster start.

A group consumes and commits; ``describe`` shows its member (id, client id, host) and the
right lag; what is refused while the group has a member is refused with typed errors; after
the consumer closes, ``reset-offsets --to-earliest --execute`` rewinds the group and a new
consumer reads everything again; a brand-new group gets offsets by reset and loses them by
delete-offsets; list and delete.
"""

from __future__ import annotations

import json

import pytest

from cluster.cli import main
from cluster.client import AdminClient, Consumer, Producer, TopicPartition
from lograft.protocol.errors import (
    GroupIdNotFoundError,
    GroupNotEmptyError,
    GroupSubscribedToTopicError,
    UnknownMemberIdError,
)
from tests.integration.nodes import wait_until
from tests.integration.quorum import CLUSTER_TIMEOUT_S, QuorumCluster

pytestmark = pytest.mark.integration

P0, P1 = TopicPartition("events", 0), TopicPartition("events", 1)


def _cli(
    capsys: pytest.CaptureFixture[str], cluster: QuorumCluster, *argv: str
) -> tuple[int, str, str]:
    code = main(["--bootstrap", cluster.bootstrap, "--api-timeout-ms", "30000", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _produce(cluster: QuorumCluster, counts: dict[int, int], start: int = 0) -> None:
    with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as producer:
        for partition, count in counts.items():
            for n in range(count):
                producer.send("events", f"{partition}-{start + n}".encode(), partition=partition)
        producer.flush()


def _read_all(consumer: Consumer, want: int) -> list[str]:
    seen: list[str] = []

    def enough() -> bool:
        seen.extend(r.value.decode() for r in consumer.poll(timeout_ms=100) if r.value)
        return len(seen) >= want

    wait_until(enough, CLUSTER_TIMEOUT_S, f"{want} records")
    return seen


# Over 70 lines: a test that walks the groups commands in order on one group.
def test_groups_describe_reset_list_and_delete(
    grouped: QuorumCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    assert grouped.create_topic(grouped.nodes[1], "events", 2, 3) == 0
    _produce(grouped, {0: 10, 1: 10})
    config = {
        "bootstrap.servers": grouped.bootstrap,
        "group.id": "readers",
        "client.id": "reader-1",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    admin = AdminClient({"bootstrap.servers": grouped.bootstrap, "default.api.timeout.ms": 30000})
    consumer = Consumer(config)
    try:
        consumer.subscribe(["events"])
        _read_all(consumer, 20)
        consumer.commit({P0: 6, P1: 10})
        _produce(grouped, {1: 3}, start=10)

        def stable() -> bool:
            consumer.poll(timeout_ms=50)  # keeps the member reconciling
            return admin.describe_consumer_groups(["readers"])["readers"].state == "Stable"

        wait_until(stable, CLUSTER_TIMEOUT_S, "a stable group")
        description = admin.describe_consumer_groups(["readers"])["readers"]
        (member,) = description.members
        assert (member.client_id, member.host) == ("reader-1", "/127.0.0.1")
        assert member.assignment == {P0, P1}
        assert description.coordinator.id in grouped.broker_ids
        rows = {row.topic_partition: row for row in admin.consumer_group_lag("readers")}
        assert {tp: (r.current_offset, r.log_end_offset, r.lag) for tp, r in rows.items()} == {
            P0: (6, 10, 4),
            P1: (10, 13, 3),
        }
        assert {r.member_id for r in rows.values()} == {member.member_id}

        code, out, _ = _cli(capsys, grouped, "groups", "describe", "readers")
        assert code == 0
        lines = [line.split() for line in out.splitlines()]
        assert lines[0] == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        assert lines[1:] == [
            ["readers", "events", "0", "6", "10", "4", member.member_id, "/127.0.0.1", "reader-1"],
            ["readers", "events", "1", "10", "13", "3", member.member_id, "/127.0.0.1", "reader-1"],
        ]
        code, out, _ = _cli(capsys, grouped, "groups", "describe", "readers", "--json")
        shown = json.loads(out)
        assert shown["state"] == "Stable" and shown["members"][0]["client_id"] == "reader-1"
        assert [p["lag"] for p in shown["partitions"]] == [4, 3]

        # While the group has a member: no reset, no admin commit, no delete.
        code, _, err = _cli(
            capsys, grouped, "groups", "reset-offsets", "--group", "readers", "--all-topics",
            "--to-earliest", "--execute",
        )  # fmt: skip
        assert code == 1
        assert err.startswith("lograft: GROUP_NOT_EMPTY:") and "current state is Stable" in err
        with pytest.raises(UnknownMemberIdError, match="stop its consumers first"):
            admin.alter_consumer_group_offsets("readers", {P0: 0})[P0].result()
        with pytest.raises(GroupNotEmptyError):
            admin.delete_consumer_groups(["readers"])["readers"].result()
        with pytest.raises(GroupSubscribedToTopicError):
            admin.delete_consumer_group_offsets("readers", [P0])[P0].result()
        assert admin.list_consumer_group_offsets("readers")[P0].offset == 6  # type: ignore[union-attr]
    finally:
        consumer.close()

    try:
        assert admin.describe_consumer_groups(["readers"])["readers"].state == "Empty"
        code, out, err = _cli(
            capsys, grouped, "groups", "reset-offsets", "--group", "readers", "--topic", "events",
            "--to-earliest",
        )  # fmt: skip
        assert code == 0 and "--execute option is missing" in err
        assert [line.split() for line in out.splitlines()][1:] == [
            ["readers", "events", "0", "0"],
            ["readers", "events", "1", "0"],
        ]
        committed = admin.list_consumer_group_offsets("readers")
        assert {tp: o.offset for tp, o in committed.items() if o} == {P0: 6, P1: 10}, "dry run"

        code, _, _ = _cli(
            capsys, grouped, "groups", "reset-offsets", "--group", "readers", "--all-topics",
            "--to-earliest", "--execute",
        )  # fmt: skip
        assert code == 0
        committed = admin.list_consumer_group_offsets("readers")
        assert {tp: o.offset for tp, o in committed.items() if o} == {P0: 0, P1: 0}
        with Consumer({**config, "auto.offset.reset": "latest"}) as again:
            again.subscribe(["events"])
            seen = _read_all(again, 23)
        assert sorted(seen) == sorted(
            [f"0-{n}" for n in range(10)] + [f"1-{n}" for n in range(13)]
        ), "the group reads again from the start"

        # A group that does not exist yet is created by a reset (--shift-by needs offsets).
        code, _, _ = _cli(
            capsys, grouped, "groups", "reset-offsets", "--group", "fresh", "--topic",
            "events:1", "--to-offset", "99", "--execute",
        )  # fmt: skip
        assert code == 0
        fresh = admin.list_consumer_group_offsets("fresh")
        assert {tp: o.offset for tp, o in fresh.items() if o} == {P1: 13}, "clamped to latest"

        code, out, _ = _cli(
            capsys, grouped, "groups", "delete-offsets", "--group", "fresh", "--topic", "events"
        )
        assert (code, out.splitlines()[1].split()) == (0, ["events", "1", "Successful"])
        assert admin.list_consumer_group_offsets("fresh") == {}

        listed = {g.group_id: g.state for g in admin.list_consumer_groups()}
        assert listed == {"readers": "Empty", "fresh": "Empty"}
        code, out, _ = _cli(capsys, grouped, "groups", "list")
        assert (code, out.split()) == (0, ["fresh", "readers"])

        code, out, _ = _cli(capsys, grouped, "groups", "delete", "readers")
        assert code == 0 and "'readers'" in out and "successful" in out
        assert [g.group_id for g in admin.list_consumer_groups()] == ["fresh"]
        with pytest.raises(GroupIdNotFoundError):
            admin.describe_consumer_groups(["readers"])
        code, _, err = _cli(capsys, grouped, "groups", "describe", "readers")
        assert code == 1 and err.startswith("lograft: GROUP_ID_NOT_FOUND:")
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_consumer_groups(["readers"])["readers"].result()
    finally:
        admin.close()
