"""``lograft configs`` and ``lograft topics alter``: argument parsing, without a cluster."""

from __future__ import annotations

import argparse

import pytest

from cluster.cli import build_parser, main
from cluster.cli.configs import alter_ops, parse_add_config, parse_delete_config
from cluster.client import AlterConfigOp, AlterConfigOpType


def test_describe_a_topic_or_a_broker() -> None:
    args = build_parser().parse_args(["configs", "describe", "--topic", "orders"])
    assert (args.command, args.configs_command, args.topic, args.broker, args.all) == (
        "configs",
        "describe",
        "orders",
        None,
        False,
    )
    args = build_parser().parse_args(["configs", "describe", "--broker", "02", "--all"])
    assert (args.topic, args.broker, args.all) == (None, "2", True)


def test_alter_collects_sets_then_deletes() -> None:
    args = build_parser().parse_args(
        [
            "configs",
            "alter",
            "--topic",
            "orders",
            "--add-config",
            "retention.ms=1000, min.insync.replicas = 2",
            "--add-config",
            "cleanup.policy=[compact,delete]",
            "--delete-config",
            "segment.bytes,flush.ms",
        ]
    )
    assert alter_ops(args) == [
        AlterConfigOp("retention.ms", "1000"),
        AlterConfigOp("min.insync.replicas", "2"),
        AlterConfigOp("cleanup.policy", "compact,delete"),
        AlterConfigOp("segment.bytes", op_type=AlterConfigOpType.DELETE),
        AlterConfigOp("flush.ms", op_type=AlterConfigOpType.DELETE),
    ]


def test_add_config_syntax() -> None:
    assert parse_add_config("a=1") == [("a", "1")]
    assert parse_add_config("a=1,b=[x,y],c=") == [("a", "1"), ("b", "x,y"), ("c", "")]
    assert parse_delete_config(" a , b ") == ["a", "b"]
    for bad in ("a", "=1", "a=1,b", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_add_config(bad)
    for bad in ("a,,b", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_delete_config(bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["configs"],
        ["configs", "describe"],  # a topic or a broker is required
        ["configs", "describe", "--topic", "t", "--broker", "1"],  # not both
        ["configs", "describe", "--broker", "one"],
        ["configs", "alter", "--topic", "t", "--add-config", "novalue"],
        ["topics", "alter", "t"],  # --partitions is required
        ["topics", "alter", "t", "--partitions", "0"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_alter_without_changes_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    # Refused before any connection is made (the bootstrap names nothing listening).
    code = main(["--bootstrap", "127.0.0.1:1", "configs", "alter", "--topic", "t"])
    assert code == 2
    assert "--add-config" in capsys.readouterr().err


def test_topics_alter_flags() -> None:
    args = build_parser().parse_args(["topics", "alter", "orders", "--partitions", "6"])
    assert (args.topics_command, args.name, args.partitions) == ("alter", "orders", 6)


@pytest.mark.parametrize(
    "argv", [["configs", "--help"], ["configs", "alter", "--help"], ["topics", "alter", "--help"]]
)
def test_help_teaches_with_an_example(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "lograft " in out.split("examples:")[1]
