"""The public gRPC API ``lograft.v1`` keeps its released shape (proto/api_compat.py).

The current protos pass against the committed baseline; and the checker is seen failing on
real breaking edits of a copy of broker.proto, each named by message and field, while the
edits the evolution rules allow pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import api_compat
import pytest
from api_compat import BreakingChange, breaking_changes, compile_protos, load_baseline
from google.protobuf import descriptor_pb2

from tests.paths import REPO_ROOT

BROKER = REPO_ROOT / "proto" / "broker.proto"


@pytest.fixture(scope="module")
def baseline() -> descriptor_pb2.FileDescriptorSet:
    return load_baseline()


def _edited(tmp_path: Path, *edits: tuple[str, str]) -> descriptor_pb2.FileDescriptorSet:
    """broker.proto copied to ``tmp_path`` with each ``(old, new)`` replaced exactly once."""
    text = BROKER.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"the edit's anchor {old!r} is not unique in broker.proto"
        text = text.replace(old, new)
    (tmp_path / "broker.proto").write_text(text)
    return compile_protos(tmp_path)


def _changes(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path, *edits: tuple[str, str]
) -> list[str]:
    """The breaking changes of the edited copy, as the checker prints them."""
    return [str(c) for c in breaking_changes(baseline, _edited(tmp_path, *edits))]


def test_the_baseline_is_the_broker_service_of_lograft_v1(
    baseline: descriptor_pb2.FileDescriptorSet,
) -> None:
    (file,) = baseline.file
    assert (file.name, file.package) == ("broker.proto", "lograft.v1")
    methods = {m.name for m in file.service[0].method}
    assert {"Produce", "Fetch", "Metadata", "ProduceRecords", "FetchRecords"} <= methods
    assert not file.HasField("source_code_info"), "the baseline must not change with comments"


def test_the_current_protos_keep_every_promise_of_the_baseline(
    baseline: descriptor_pb2.FileDescriptorSet,
) -> None:
    assert breaking_changes(baseline, compile_protos()) == []


def test_an_unchanged_copy_passes(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path
) -> None:
    assert _changes(baseline, tmp_path) == []


def test_a_renumbered_field_fails(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path
) -> None:
    assert _changes(baseline, tmp_path, ("  int32 acks = 1;", "  int32 acks = 8;")) == [
        "lograft.v1.ProduceRequest.acks: field renumbered from 1 to 8"
    ]


def test_a_removed_field_fails_until_its_number_and_name_are_reserved(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path
) -> None:
    field = "  int32 isolation_level = 6;\n"
    assert _changes(baseline, tmp_path, (field, "")) == [
        "lograft.v1.FetchRequest.isolation_level: field 6 removed without reserving both its "
        'number and its name: reserved 6; reserved "isolation_level";'
    ]
    only_number = _changes(baseline, tmp_path, (field, "  reserved 6;\n"))
    assert len(only_number) == 1 and "FetchRequest.isolation_level" in only_number[0]
    both = '  reserved 6;\n  reserved "isolation_level";\n'
    assert _changes(baseline, tmp_path, (field, both)) == []


def test_field_type_label_presence_and_name_changes_fail(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path
) -> None:
    edits = [
        ("  int64 base_offset = 4;", "  int32 base_offset = 4;"),
        ("repeated int64 batch_base_offsets = 7;", "int64 batch_base_offsets = 7;"),
        ("optional int64 known_high_watermark = 6;", "int64 known_high_watermark = 6;"),
        ("  int32 max_wait_ms = 1;", "  int32 max_wait_time_ms = 1;"),
        ("map<string, string> configs = 5;", "map<string, int32> configs = 5;"),
        ("  string cluster_id = 1;", '  string cluster_id = 1 [json_name = "cluster"];'),
    ]
    assert _changes(baseline, tmp_path, *edits) == [
        "lograft.v1.FetchPartition.known_high_watermark: field presence changed: "
        "`optional` dropped",
        "lograft.v1.FetchRequest.max_wait_ms: field 1 renamed from max_wait_ms to max_wait_time_ms",
        "lograft.v1.MetadataResponse.cluster_id: field JSON name changed from clusterId to cluster",
        "lograft.v1.PartitionProduceResponse.base_offset: field type changed from int64 to int32",
        "lograft.v1.PartitionProduceResponse.batch_base_offsets: field type changed from "
        "repeated int64 to int64",
        "lograft.v1.TopicMetadata.configs: field type changed from map<string, string> to "
        "map<string, int32>",
    ]


def test_a_removed_or_changed_method_fails(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path
) -> None:
    edits = [
        ("  rpc DeleteGroups(DeleteGroupsRequest) returns (DeleteGroupsResponse);\n", ""),
        ("returns (FetchResponse);", "returns (stream FetchResponse);"),
        ("rpc OffsetDelete(OffsetDeleteRequest)", "rpc OffsetDelete(DeleteGroupsRequest)"),
    ]
    assert _changes(baseline, tmp_path, *edits) == [
        "lograft.v1.Broker.DeleteGroups: method removed",
        "lograft.v1.Broker.Fetch: method server streaming changed from false to true",
        "lograft.v1.Broker.OffsetDelete: method input type changed from OffsetDeleteRequest "
        "to DeleteGroupsRequest",
    ]


def test_a_removed_message_and_a_renamed_package_fail(
    baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path
) -> None:
    text = BROKER.read_text().replace("ListGroupsRequest", "GroupListingRequest")
    (tmp_path / "broker.proto").write_text(text.replace("package lograft.v1;", "package x.v2;"))
    assert [str(c) for c in breaking_changes(baseline, compile_protos(tmp_path))] == [
        "lograft.v1.Broker.ListGroups: method input type changed from ListGroupsRequest to "
        "GroupListingRequest",
        "lograft.v1.ListGroupsRequest: message removed",
        "package lograft.v1: renamed to x.v2",
    ]


def test_additions_pass(baseline: descriptor_pb2.FileDescriptorSet, tmp_path: Path) -> None:
    added = _changes(
        baseline,
        tmp_path,
        (
            "  int32 isolation_level = 6;\n",
            "  int32 isolation_level = 6;\n  // A new field.\n  string rack_id = 7;\n",
        ),
        (
            "service Broker {\n",
            "service Broker {\n  rpc Ping(PingRequest) returns (ListGroupsResponse);\n",
        ),
        ("message ListGroupsRequest {}", "message ListGroupsRequest {}\nmessage PingRequest {}"),
    )
    assert added == []


ENUMS = """syntax = "proto3";
package lograft.v1;
enum Color {
  COLOR_UNSPECIFIED = 0;
  RED = 1;
  GREEN = 2;
  BLUE = 3;
}
enum Shape {
  SHAPE_UNSPECIFIED = 0;
}
"""


def test_enum_rules(tmp_path: Path) -> None:
    (tmp_path / "broker.proto").write_text(ENUMS)
    before = compile_protos(tmp_path)
    after = ENUMS.replace("  GREEN = 2;\n", "").replace("BLUE = 3", "BLUE = 4")
    after = after.replace("RED = 1", "SCARLET = 1").replace("enum Shape", "enum Form")
    (tmp_path / "broker.proto").write_text(after)
    assert [str(c) for c in breaking_changes(before, compile_protos(tmp_path))] == [
        "lograft.v1.Color.BLUE: enum value renumbered from 3 to 4",
        "lograft.v1.Color.GREEN: enum value 2 removed without reserving both its number and "
        'its name: reserved 2; reserved "GREEN";',
        "lograft.v1.Color.RED: enum value 1 renamed to SCARLET",
        "lograft.v1.Shape: enum removed",
    ]
    reserved = ENUMS.replace("  GREEN = 2;\n", '  reserved 2;\n  reserved "GREEN";\n  PINK = 5;\n')
    (tmp_path / "broker.proto").write_text(reserved)
    assert breaking_changes(before, compile_protos(tmp_path)) == []


def test_the_command_line_fails_on_a_breaking_change_and_refreshes_the_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(BROKER, tmp_path / "broker.proto")
    stored = tmp_path / "api" / "lograft.v1.binpb"
    where = ["--proto-dir", str(tmp_path), "--baseline", str(stored)]
    assert api_compat.main(["baseline", *where]) == 0
    assert load_baseline(stored) == compile_protos(tmp_path)
    assert api_compat.main(["check", *where]) == 0
    text = BROKER.read_text().replace("  int32 acks = 1;", "  int32 acks = 9;")
    (tmp_path / "broker.proto").write_text(text)
    capsys.readouterr()
    assert api_compat.main(["check", *where]) == 1
    printed = capsys.readouterr()
    assert printed.out == "lograft.v1.ProduceRequest.acks: field renumbered from 1 to 9\n"
    assert "lograft.v2" in printed.err


def test_a_change_reads_as_subject_then_change() -> None:
    change = BreakingChange("lograft.v1.X.y", "field removed")
    assert str(change) == "lograft.v1.X.y: field removed"
