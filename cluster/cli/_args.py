"""Argument types and client factories shared by the ``lograft`` commands."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from cluster.client import DEFAULT_BOOTSTRAP_SERVERS, AdminClient

__all__ = [
    "BOOTSTRAP_ENV",
    "Streams",
    "acks",
    "admin_client",
    "config_pair",
    "default_bootstrap",
    "non_negative",
    "offset",
    "positive",
]

BOOTSTRAP_ENV = "LOGRAFT_BOOTSTRAP"


@dataclass(frozen=True, slots=True)
class Streams:
    """Where a command reads and writes: stdin as bytes, stdout as text and bytes, stderr."""

    stdin: BinaryIO
    stdout: TextIO
    stdout_bytes: BinaryIO
    stderr: TextIO


def default_bootstrap() -> str:
    """``LOGRAFT_BOOTSTRAP`` if set and not empty, else ``127.0.0.1:9092``."""
    return os.environ.get(BOOTSTRAP_ENV, "").strip() or DEFAULT_BOOTSTRAP_SERVERS


def config_pair(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` → ``(name, value)``."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def positive(text: str) -> int:
    """An integer above zero."""
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def non_negative(text: str) -> int:
    """An integer at or above zero."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def acks(text: str) -> str:
    """``all``, ``-1``, ``0`` or ``1``."""
    if text.strip().lower() not in ("all", "-1", "0", "1"):
        raise argparse.ArgumentTypeError(f"acks must be all, -1, 0 or 1, got {text!r}")
    return text.strip().lower()


def offset(text: str) -> str | int:
    """``earliest``, ``latest`` or an offset at or above zero."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return lowered
    return non_negative(text)


def client_properties(
    args: argparse.Namespace, extra: Sequence[tuple[str, str]] = ()
) -> dict[str, object]:
    """Configs every client of a command shares, then ``extra`` (``--*-property``) on top."""
    config: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "client.id": "lograft-cli",
        "request.timeout.ms": min(30000, args.api_timeout_ms),
    }
    config.update(dict(extra))
    return config


def admin_client(args: argparse.Namespace) -> AdminClient:
    """An ``AdminClient`` for the command's bootstrap and ``--api-timeout-ms``."""
    return AdminClient(
        {
            **client_properties(args),
            "default.api.timeout.ms": args.api_timeout_ms,
        }
    )
