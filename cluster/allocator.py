"""Keeping the node's freed buffer memory for reuse instead of giving it back at once.

A broker's large buffers (request bodies, record batches on their way to a segment, fetch
responses of up to a few MiB) live for one request each. With glibc's defaults every
such buffer above 128 KiB, or above the size of the last one freed, is a fresh ``mmap``,
and the free space at the top of the heap is handed back to the kernel as soon as it
exceeds twice that: the next buffer then faults in and zeroes every page again. Measured
on one partition with 1 KiB records (RF 3, ``acks=all``), a third of the partition
leader's CPU went to those page faults, and keeping the memory raised the throughput by
about a fifth (``docs/decisions/0019-the-node-keeps-freed-buffers.md``).

:func:`keep_freed_memory` raises both thresholds for the whole process, so that buffers
up to :data:`MMAP_THRESHOLD_BYTES` come from the heap and up to
:data:`TRIM_THRESHOLD_BYTES` of free heap stays mapped. It is called by the node's entry
point only: a library must not change its host process's allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "keep_freed_memory"]

log = logging.getLogger(__name__)

# glibc's malloc.h: the mallopt parameters.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

# glibc's ceiling for M_MMAP_THRESHOLD on 64-bit (HEAP_MAX_SIZE / 2).
MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
"""glibc's ``M_TRIM_THRESHOLD``: up to this much free heap stays mapped. Twice the mmap
threshold, the ratio glibc's own adjustment keeps between the two."""


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds; False (and a log line) where there is no
    glibc ``mallopt`` or it refuses, as on musl: the node then runs with the defaults."""
    libc_name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(libc_name)
        mallopt = libc.mallopt
    except (OSError, AttributeError) as exc:
        log.info("allocator tuning unavailable libc=%s error=%s", libc_name, exc)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied: bool = (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )
    if not applied:
        log.warning(
            "allocator tuning refused mmap_threshold=%d trim_threshold=%d",
            MMAP_THRESHOLD_BYTES,
            TRIM_THRESHOLD_BYTES,
        )
    return applied
