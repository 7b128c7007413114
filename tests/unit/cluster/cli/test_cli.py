"""``lograft`` argument parsing and the error contract (one line on stderr, non-zero exit)."""

# Over 600 lines: every subcommand's parsing and error contract, beside the fakes they share.
from __future__ import annotations

import argparse
import io
import os
import signal
import sys
from pathlib import Path

import pytest

from cluster import cli
from cluster.cli import build_parser, consume, default_bootstrap, main
from cluster.cli._args import (
    MAX_CONFIG_FILE_BYTES,
    client_properties,
    load_client_config,
    parse_properties,
    progress_bar,
    resolve_bootstrap,
)
from cluster.cli.consume import consumer_config, output_format
from cluster.cli.perf import e2e_summary, percentile
from cluster.cli.produce import input_format, producer_config
from cluster.client import ConsumerRecord, TopicPartition
from lograft.protocol.errors import InvalidConfigError


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
        ["consume", "t", "--key-separator", ""],
        ["produce", "t", "--key-separator", ""],
        ["--log-level", "bogus", "topics", "list"],
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
    args = build_parser().parse_args(["produce", "t"])
    assert args.acks is None  # not given: the config file or the default decides
    assert producer_config(args, [])["acks"] == "all"


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


def test_bootstrap_default_comes_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no ./data/cluster/cluster.json here
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP", raising=False)
    assert default_bootstrap() == "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
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


# ---- the config file and where each config comes from ---------------------------------------


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_properties_syntax() -> None:
    text = (
        "# a comment\n"
        "! another comment\n"
        "\n"
        "   bootstrap.servers = h1:1,\\\n"
        "       h2:2\n"
        "client.id: my\\tclient\n"
        "max.poll.records 42\n"
        "acks=all   \n"
        "empty.value=\n"
    )
    entries = parse_properties(text, "f.properties")
    assert [(e.name, e.value, e.line) for e in entries] == [
        ("bootstrap.servers", "h1:1,h2:2", 4),
        ("client.id", "my\tclient", 6),
        ("max.poll.records", "42", 7),
        ("acks", "all", 8),
        ("empty.value", "", 9),
    ]
    with pytest.raises(InvalidConfigError, match=r"f\.properties:2:"):
        parse_properties("a=1\n=nameless\n", "f.properties")


def test_config_file_unknown_name_and_bad_value_name_the_line(tmp_path: Path) -> None:
    unknown = _write(tmp_path / "unknown.properties", "acks=all\n\n# c\nno.such.config=1\n")
    with pytest.raises(InvalidConfigError, match=r"unknown\.properties:4: unknown client config"):
        load_client_config(unknown)
    bad = _write(tmp_path / "bad.properties", "max.poll.records=zero\n")
    with pytest.raises(InvalidConfigError, match=r"bad\.properties:1: max\.poll\.records"):
        load_client_config(bad)
    with pytest.raises(InvalidConfigError, match="cannot read config file"):
        load_client_config(str(tmp_path / "missing.properties"))
    huge = tmp_path / "huge.properties"
    huge.write_bytes(b"#" * (MAX_CONFIG_FILE_BYTES + 1))
    with pytest.raises(InvalidConfigError, match="larger than"):
        load_client_config(str(huge))


def test_bad_config_file_is_one_line_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "client.properties", "request.timeout.ms=1000\nlinger=5\n")
    assert main(["--command-config", path, "topics", "list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lograft: INVALID_CONFIG")
    assert f"{path}:2" in err
    assert len(err.strip().splitlines()) == 1


def test_precedence_flag_property_file_environment_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LOGRAFT_CONFIG", raising=False)
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", "env:1")
    monkeypatch.chdir(tmp_path)  # no ./data/cluster/cluster.json here
    parser = build_parser()
    # Default and environment.
    plain = parser.parse_args(["produce", "t"])
    assert resolve_bootstrap(plain) == "env:1"
    assert producer_config(plain, [])["bootstrap.servers"] == "env:1"
    monkeypatch.delenv("LOGRAFT_BOOTSTRAP")
    assert producer_config(plain, [])["bootstrap.servers"] == (
        "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    )
    monkeypatch.setenv("LOGRAFT_BOOTSTRAP", "env:1")
    # The file beats the environment and the defaults.
    path = _write(
        tmp_path / "c.properties",
        "bootstrap.servers=file:1\nacks=1\nlinger.ms=7\nmax.poll.records=9\n",
    )
    args = parser.parse_args(["--config", path, "produce", "t"])
    assert resolve_bootstrap(args) == "file:1"
    config = producer_config(args, args.producer_property)
    assert (config["bootstrap.servers"], config["acks"], config["linger.ms"]) == (
        "file:1",
        "1",
        "7",
    )
    assert "max.poll.records" not in config  # a consumer config: not for the producer
    # --producer-property beats the file; a flag beats both.
    args = parser.parse_args(
        ["--config", path, "produce", "t", "--producer-property", "acks=0", "--linger-ms", "3"]
    )
    config = producer_config(args, args.producer_property)
    assert (config["acks"], config["linger.ms"]) == ("0", 3)
    args = parser.parse_args(
        ["--config", path, "produce", "t", "--producer-property", "acks=0", "--acks", "all"]
    )
    assert producer_config(args, args.producer_property)["acks"] == "all"
    # --bootstrap beats a bootstrap.servers property.
    args = parser.parse_args(
        ["--bootstrap", "flag:1", "--config", path, "consume", "t",
         "--consumer-property", "bootstrap.servers=prop:1"]
    )  # fmt: skip
    consumer = consumer_config(args)
    assert consumer["bootstrap.servers"] == "flag:1"
    assert consumer["max.poll.records"] == "9"
    assert "acks" not in consumer
    args = parser.parse_args(
        ["--config", path, "consume", "t", "--consumer-property", "bootstrap.servers=prop:1"]
    )
    assert consumer_config(args)["bootstrap.servers"] == "prop:1"


def test_config_file_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _write(tmp_path / "env.properties", "bootstrap.servers=fromenv:1\nclient.id=me\n")
    monkeypatch.setenv("LOGRAFT_CONFIG", path)
    args = build_parser().parse_args(["topics", "list"])
    assert resolve_bootstrap(args) == "fromenv:1"
    assert client_properties(args)["client.id"] == "me"
    other = _write(tmp_path / "flag.properties", "client.id=flag\n")
    args = build_parser().parse_args(["--config", other, "topics", "list"])
    assert client_properties(args)["client.id"] == "flag"


def test_consume_group_flags_and_formats() -> None:
    parser = build_parser()
    args = parser.parse_args(["consume", "t", "--group", "g", "--from-beginning"])
    config = consumer_config(args)
    assert (config["group.id"], config["auto.offset.reset"]) == ("g", "earliest")
    assert output_format(args) == "raw"
    assert output_format(parser.parse_args(["consume", "t", "--print-key"])) == "kv"
    assert output_format(parser.parse_args(["consume", "t", "--key-separator", ","])) == "kv"
    assert output_format(parser.parse_args(["consume", "t", "--format", "json"])) == "json"
    with pytest.raises(InvalidConfigError):
        output_format(parser.parse_args(["consume", "t", "--format", "json", "--print-key"]))
    assert input_format(parser.parse_args(["produce", "t"])) == "raw"
    assert input_format(parser.parse_args(["produce", "t", "--key-separator", ":"])) == "kv"
    with pytest.raises(InvalidConfigError):
        input_format(
            parser.parse_args(["produce", "t", "--format", "json", "--key-separator", ":"])
        )
    keep = parser.parse_args(["produce", "t", "--format", "json", "--keep-partition"])
    assert (input_format(keep), keep.keep_partition) == ("json", True)
    assert parser.parse_args(["produce", "t", "--format", "json"]).keep_partition is False
    with pytest.raises(InvalidConfigError, match="--keep-partition needs --format json"):
        input_format(parser.parse_args(["produce", "t", "--keep-partition"]))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--group", "g", "--partition", "0"], "--group and --partition"),
        (["--group", "g", "--offset", "5"], "--group and --offset"),
        (["--consumer-property", "group.id=g", "--partition", "0"], "group.id=g and --partition"),
        (
            ["--consumer-property", "group.id=g", "--partition", "0", "--offset", "5"],
            "group.id=g and --partition",
        ),
    ],
)
def test_consume_group_excludes_partition_and_offset(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--bootstrap", "127.0.0.1:1", "consume", "t", *extra]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lograft: INVALID_CONFIG")
    assert message in err


def test_perf_e2e_flags() -> None:
    args = build_parser().parse_args(
        ["perf", "e2e", "--topic", "lat", "--num-records", "50", "--acks", "1", "--json"]
    )
    assert (args.perf_command, args.topic, args.num_records, args.acks) == ("e2e", "lat", 50, "1")
    assert (args.partition, args.record_size, args.throughput, args.json) == (0, 100, None, True)


def test_e2e_summary() -> None:
    summary = e2e_summary(
        [float(n) for n in range(100, 0, -1)],
        2.0,
        record_size=10,
        acks="all",
        partition=0,
        target_records_per_sec=None,
    )
    assert summary["records"] == 100
    assert (summary["latency_ms_p50"], summary["latency_ms_p99"]) == (51.0, 100.0)
    assert (summary["latency_ms_max"], summary["records_per_sec"]) == (100.0, 50.0)
    assert summary["mode"] == "one-at-a-time"
    assert percentile([], 0.5) == 0.0
    assert "timeline" not in summary
    histogram = dict((bound, count) for bound, count in summary["histogram"])
    assert sum(histogram.values()) == 100
    assert (histogram[1], histogram[5], histogram[100], histogram[None]) == (1, 2, 25, 0)


def test_e2e_summary_timeline_groups_records_by_the_second_they_were_sent() -> None:
    summary = e2e_summary(
        [4.0, 2.0, 9.0, 30.0],
        3.0,
        record_size=10,
        acks="all",
        partition=0,
        target_records_per_sec=2,
        sent_s=[0.1, 0.6, 1.2, 2.9],
    )
    assert summary["timeline"] == [[0, 2, 4.0, 4.0], [1, 1, 9.0, 9.0], [2, 1, 30.0, 30.0]]
    assert summary["histogram"][-1] == [None, 0]


# ---- help ------------------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_top_level_help_lists_commands_and_points_at_command_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("topics", "produce", "consume", "transactions", "perf", "cluster", "node"):
        assert f"    {command} " in out
    assert "lograft COMMAND --help" in out
    assert "examples:" in out


@pytest.mark.parametrize(
    "path",
    [
        ("produce",),
        ("consume",),
        ("transactions",),
        ("perf",),
        ("perf", "produce"),
        ("perf", "consume"),
        ("perf", "e2e"),
        ("cluster",),
        ("cluster", "up"),
        ("cluster", "down"),
        ("cluster", "status"),
        ("cluster", "logs"),
        ("cluster", "kill"),
        ("cluster", "restart"),
    ],
)
def test_command_help_teaches(path: tuple[str, ...]) -> None:
    parser = build_parser()
    for name in path:
        parser = _subparsers(parser)[name]
    assert parser.description and len(parser.description) > 40
    assert parser.epilog and parser.epilog.startswith("examples:")
    examples = [line for line in parser.epilog.splitlines()[1:] if line[2:3] not in ("", " ")]
    assert 1 <= len(examples) <= 3
    assert " ".join(("lograft", *path)) in parser.epilog
    assert parser.formatter_class is argparse.RawDescriptionHelpFormatter
    help_text = parser.format_help()
    assert parser.epilog in help_text  # line breaks kept


def test_consume_help_documents_the_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["consume", "--help"])
    out = capsys.readouterr().out
    for field in ('"topic"', '"partition"', '"offset"', '"timestamp"', '"headers"'):
        assert field in out
    assert '"value_encoding": "base64"' in out


def test_global_config_before_node_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(cli, "_run_node", lambda argv: seen.append(argv) or 0)
    assert main(["--config", "x.properties", "node", "--node-id", "3"]) == 0
    assert seen == [["--node-id", "3"]]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        with progress_bar(stream, total=4, desc="perf e2e t") as bar:
            bar.update(4)
            bar.refresh()
    assert "perf e2e t" in terminal.getvalue()
    assert "4/4" in terminal.getvalue()
    assert pipe.getvalue() == ""
    with progress_bar(terminal, total=None, desc="off", enabled=False) as bar:
        bar.update(1)
    assert "off" not in terminal.getvalue()


# ---- consume with a group: what is committed is what was printed ------------------------------


class _FakeGroupConsumer:
    """A group member over one partition of ``TOTAL`` records: positions move as ``poll``
    returns batches, ``commit`` (and closing, as with enable.auto.commit) saves them."""

    TOTAL = 1000
    BATCH = 50
    last: _FakeGroupConsumer | None = None
    interrupt_at_poll: int | None = None
    """Send this process a SIGINT (Ctrl-C) inside that poll, after positions moved."""

    def __init__(self, config: dict[str, object]) -> None:
        self.config: dict[str, object] = {"enable.auto.commit": True, **config}
        self.tp = TopicPartition("t", 0)
        self.position = 0
        self.committed: int | None = None
        self.polls = 0
        _FakeGroupConsumer.last = self

    def __enter__(self) -> _FakeGroupConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.config["enable.auto.commit"]:
            self.commit()

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def subscribe(self, topics: list[str]) -> None:
        pass

    def assignment(self) -> set[TopicPartition]:
        return {self.tp}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.position = offset

    def commit(self) -> None:
        self.committed = self.position

    def poll(self, timeout_ms: int) -> list[ConsumerRecord]:
        end = min(self.position + self.BATCH, self.TOTAL)
        batch = [
            ConsumerRecord("t", 0, offset, 0, None, str(offset).encode(), ())
            for offset in range(self.position, end)
        ]
        self.position = end
        self.polls += 1
        if self.polls == self.interrupt_at_poll:
            os.kill(os.getpid(), signal.SIGINT)
        return batch


class _ClosingPipe(io.BytesIO):
    """stdout of ``| head``: flushes fail with EPIPE from the ``fail_at``-th on."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.flushes = 0
        self.delivered = b""

    def flush(self) -> None:
        self.flushes += 1
        if self.flushes >= self.fail_at:
            raise BrokenPipeError(32, "Broken pipe")
        self.delivered = self.getvalue()


def _run_consume(
    monkeypatch: pytest.MonkeyPatch, out: io.BytesIO, *extra: str
) -> tuple[int | None, BaseException | None]:
    monkeypatch.setattr(consume, "Consumer", _FakeGroupConsumer)
    args = build_parser().parse_args(["consume", "t", "--group", "g", *extra])
    args.bootstrap_flag = "127.0.0.1:1"
    streams = cli._args.Streams(io.BytesIO(), io.StringIO(), out, io.StringIO())
    try:
        return consume.run(args, streams), None
    except BaseException as exc:
        return None, exc


def test_consume_broken_pipe_commits_only_what_reached_the_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _ClosingPipe(fail_at=3)
    _, escaped = _run_consume(monkeypatch, out)
    assert isinstance(escaped, BrokenPipeError)  # main() turns it into exit 0
    consumer = _FakeGroupConsumer.last
    assert consumer is not None
    delivered = out.delivered.decode().split()
    assert delivered == [str(n) for n in range(2 * _FakeGroupConsumer.BATCH)]
    assert consumer.committed == len(delivered)


def test_consume_ctrl_c_commits_only_what_was_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.BytesIO()
    # Ctrl-C arrives after the client moved its positions past a batch it has not handed
    # over yet.
    monkeypatch.setattr(_FakeGroupConsumer, "interrupt_at_poll", 3)
    handler_before = signal.getsignal(signal.SIGINT)
    code, escaped = _run_consume(monkeypatch, out)
    assert (code, escaped) == (0, None)
    consumer = _FakeGroupConsumer.last
    assert consumer is not None
    printed = out.getvalue().decode().split()
    assert printed == [str(n) for n in range(len(printed))]
    assert consumer.committed == len(printed)
    assert signal.getsignal(signal.SIGINT) is handler_before


def test_log_level_is_case_insensitive() -> None:
    args = build_parser().parse_args(["--log-level", "debug", "topics", "list"])
    assert args.log_level == "DEBUG"


def test_cluster_commands_do_not_read_the_client_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOGRAFT_CONFIG", str(tmp_path / "missing.properties"))
    ran: list[str] = []

    def fake_cluster(args: argparse.Namespace, out: object, err: object) -> int:
        ran.append(args.command)
        return 0

    monkeypatch.setattr(cli, "run_cluster_command", fake_cluster)
    assert main(["cluster", "status"]) == 0
    assert ran == ["cluster"]
    # A client command still fails on the same file, in one line.
    assert main(["topics", "list"]) == 1
    assert "cannot read config file" in capsys.readouterr().err


def test_group_id_from_the_config_file_excludes_partition(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "client.properties", "group.id=from-file\n")
    argv = ["--bootstrap", "127.0.0.1:1", "--config", path, "consume", "t", "--partition", "0"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("lograft: INVALID_CONFIG: group.id=from-file and --partition")
