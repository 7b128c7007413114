"""The command-line tables of ``configuration.md``: ``lograft node`` and ``lograft``'s global
options, read from their argument parsers."""

from __future__ import annotations

import argparse
import inspect
import logging
import re
from unittest import mock

from cluster import cli, node
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


def _config_aliases() -> list[str]:
    """Names of server.properties that ``lograft node`` also takes as ``--config``."""
    source = inspect.getsource(node.main)
    return sorted(set(re.findall(r'overrides\.pop\("([a-z.]+)"', source)))


def command_lines() -> list[str]:
    lines = [
        "## `lograft node` command line (`cluster.node`)",
        "",
        "`lograft node ...` and `python -m cluster.node ...` run one node in the foreground.",
        "",
    ]
    lines += _flag_table(_captured_node_parser())
    aliases = _config_aliases()
    if aliases:
        lines += [
            "",
            "Kafka's `server.properties` names "
            + ", ".join(code_span(a) for a in aliases)
            + " are accepted as `--config NAME=VALUE` too; the flags win.",
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
