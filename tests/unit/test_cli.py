"""``lograft`` argument parsing and the error contract (one line on stderr, non-zero exit)."""

from __future__ import annotations

import io
import sys

import pytest

from cluster import cli
from cluster.cli import build_parser, default_bootstrap, main


def test_topics_create_flags() -> None:
    args = build_parser().parse_args(
        [
            "topics",
            "create",
            "orders",
            "--partitions",
            "6",
            "--replication-factor",
            "3",
            "--config",
            "retention.ms=1000",
            "--config",
            "segment.bytes = 1048576",
        ]
    )
    assert (args.command, args.topics_command, args.name) == ("topics", "create", "orders")
    assert args.partitions == 6
    assert args.replication_factor == 3
    assert dict(args.config) == {"retention.ms": "1000", "segment.bytes": "1048576"}


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create", "t", "--partitions", "0"],
        ["topics", "create", "t", "--config", "novalue"],
        ["topics"],
        ["produce", "t", "--acks", "2"],
        ["consume", "t", "--max-messages", "0"],
        ["consume", "t", "--offset", "-3"],
        ["perf", "produce", "--topic", "t", "--num-records", "10"],
        ["perf", "consume", "--topic", "t"],
        [],
    ],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_topics_list_describe_delete() -> None:
    parser = build_parser()
    assert parser.parse_args(["topics", "list"]).topics_command == "list"
    assert parser.parse_args(["topics", "describe"]).name is None
    assert parser.parse_args(["topics", "describe", "t"]).name == "t"
    assert parser.parse_args(["topics", "delete", "t"]).name == "t"


def test_produce_flags() -> None:
    args = build_parser().parse_args(
        ["produce", "t", "--acks", "1", "--key-separator", ":", "--compression-type", "lz4"]
    )
    assert (args.topic, args.acks, args.key_separator, args.compression_type) == (
        "t",
        "1",
        ":",
        "lz4",
    )
    assert build_parser().parse_args(["produce", "t"]).acks == "all"


def test_consume_flags() -> None:
    args = build_parser().parse_args(
        [
            "consume",
            "t",
            "--from-beginning",
            "--max-messages",
            "10",
            "--group",
            "g",
            "--print-key",
            "--timeout-ms",
            "500",
        ]
    )
    assert args.from_beginning and args.print_key
    assert (args.max_messages, args.group, args.timeout_ms) == (10, "g", 500)
    offsets = build_parser().parse_args(["consume", "t", "--partition", "2", "--offset", "7"])
    assert (offsets.partition, offsets.offset) == (2, 7)
    assert build_parser().parse_args(["consume", "t", "--offset", "earliest"]).offset == "earliest"


def test_perf_flags() -> None:
    args = build_parser().parse_args(
        [
            "perf",
            "produce",
            "--topic",
            "t",
            "--num-records",
            "1000",
            "--record-size",
            "100",
            "--acks",
            "0",
            "--bulk",
            "--batch-size",
            "65536",
            "--linger-ms",
            "10",
            "--json",
        ]
    )
    assert (args.perf_command, args.topic, args.num_records, args.record_size) == (
        "produce",
        "t",
        1000,
        100,
    )
    assert args.bulk and args.json
    assert (args.acks, args.batch_size, args.linger_ms) == ("0", 65536, 10)
    consume = build_parser().parse_args(
        ["perf", "consume", "--topic", "t", "--messages", "5", "--json"]
    )
    assert (consume.perf_command, consume.messages, consume.json) == ("consume", 5, True)


def test_bootstrap_default_comes_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP", raising=False)
    assert default_bootstrap() == "127.0.0.1:9092"
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", "10.1.2.3:9999")
    assert default_bootstrap() == "10.1.2.3:9999"
    args = build_parser().parse_args(["--bootstrap", "h:1", "topics", "list"])
    assert args.bootstrap == "h:1"


def test_node_arguments_are_passed_through(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def fake_node(argv: list[str]) -> int:
        seen.append(argv)
        return 7

    monkeypatch.setattr(cli, "_run_node", fake_node)
    node_argv = ["--node-id", "1", "--data-dir", "/tmp/x", "--listen", "127.0.0.1:1", "-h"]
    assert main(["node", *node_argv]) == 7
    assert main(["--bootstrap", "a:1", "node", "--node-id", "2"]) == 7
    assert seen == [node_argv, ["--node-id", "2"]]


def test_unreachable_cluster_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--bootstrap", "127.0.0.1:1", "--api-timeout-ms", "300", "topics", "list"])
    assert code == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lograft: NETWORK_EXCEPTION")
    assert "Traceback" not in captured.err
    assert captured.out == ""


def test_consume_offset_needs_partition(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bootstrap", "127.0.0.1:1", "consume", "t", "--offset", "3"]) == 1
    assert capsys.readouterr().err.startswith("lograft: INVALID_CONFIG")


def test_produce_line_without_separator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"no-separator\n")))
    assert main(["--bootstrap", "127.0.0.1:1", "produce", "t", "--key-separator", ":"]) == 1
    assert capsys.readouterr().err.startswith("lograft: INVALID_REQUEST")


def test_bad_producer_property_is_invalid_config(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["produce", "t", "--compression-type", "brotli"]
    assert main(["--bootstrap", "127.0.0.1:1", *argv]) == 1
    assert capsys.readouterr().err.startswith("lograft: INVALID_CONFIG")
