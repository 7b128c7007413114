"""The command-line tables of ``configuration.md``: ``lograft node`` and ``lograft``'s global
options, read from their argument parsers."""

from __future__ import annotations

import argparse
import logging
from unittest import mock

from cluster import cli, node
from lograft.protocol.node_config import IDENTITY_SETTINGS
from refgen.markdown import code_span, inline, sanitize, table

__all__ = ["command_lines"]

log = logging.getLogger(__name__)


def _captured_node_parser() -> argparse.ArgumentParser:
    """The parser ``cluster.node._parse_args`` builds, caught before it parses anything."""
    captured: list[argparse.ArgumentParser] = []

    def catch(
        self: argparse.ArgumentParser, args: object = None, namespace: object = None
    ) -> argparse.Namespace:
        captured.append(self)
        return argparse.Namespace()

    with mock.patch.object(argparse.ArgumentParser, "parse_args", catch):
        node._parse_args([])
    return captured[0]


def _flag_default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    default = action.default
    if default is None or default == "" or default == [] or default is False:
        return "—"
    return f"`{sanitize(str(default))}`"


def _flag_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {**vars(action), "prog": parser.prog}
    return text


def _flag_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        metavar = action.metavar if isinstance(action.metavar, str) else None
        if action.nargs == 0:
            spelled = ", ".join(action.option_strings)
        else:
            value = metavar or action.dest.upper()
            spelled = ", ".join(f"{o} {value}" for o in action.option_strings)
        rows.append((code_span(spelled), _flag_default(action), inline(_flag_help(parser, action))))
    return table(("flag", "default", "description"), rows)


def command_lines() -> list[str]:
    lines = [
        "## `lograft node` command line (`cluster.node`)",
        "",
        "`lograft node ...` and `python -m cluster.node ...` run one node in the foreground.",
        "",
    ]
    lines += _flag_table(_captured_node_parser())
    lines += [
        "",
        "The node's identity settings, by their `server.properties` names, as "
        "`--config NAME=VALUE` (`lograft.protocol.node_config.IDENTITY_SETTINGS`; a flag wins "
        "over the `--config` of its setting). `lograft.protocol.node_config.node_setting_names()` "
        "lists these, the broker settings and the node settings: every name `--config` accepts.",
        "",
    ]
    lines += table(
        ("name", "description"),
        [(code_span(name), inline(doc)) for name, doc in IDENTITY_SETTINGS.items()],
    )
    lines += [
        "",
        "`lograft node health [--bootstrap HOST:PORT] [--timeout-s S] [--json]` asks a running "
        "node (default `127.0.0.1:9092`) whether it is healthy: exit 0 when registered, "
        "unfenced and caught up with the metadata log (a controller-only node: when it knows "
        "a quorum leader), else 1, with one line saying why.",
    ]
    lines += [
        "",
        "## `lograft` global options (`cluster.cli`)",
        "",
        "Given before the command (`lograft --bootstrap HOST:PORT topics list`).",
        "",
    ]
    lines += _flag_table(cli.build_parser())
    return lines
