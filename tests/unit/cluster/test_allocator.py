"""The node's allocator tuning: glibc accepts both thresholds, and a libc without
``mallopt`` leaves the node on the defaults instead of failing to start."""

from __future__ import annotations

import ctypes
import platform

import pytest

from cluster import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_glibc_accepts_both_thresholds() -> None:
    assert allocator.keep_freed_memory() is True


def test_a_libc_without_mallopt_leaves_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())  # a library with no mallopt
    assert allocator.keep_freed_memory() is False
