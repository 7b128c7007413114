"""The file names of a metadata log directory (``__cluster_metadata-0/``).

The directory layout, and the order in which these files are written, are described in
:mod:`controller.storage.disk_storage`; snapshot file names (``<end>-<epoch>.checkpoint``)
and every byte format are in :mod:`controller.storage.formats`. Both the writer
(:mod:`controller.storage.disk_storage`) and the recovery (:mod:`controller.storage.recovery`)
use these names.
"""

from __future__ import annotations

__all__ = ["LOCK_FILE", "LOG_FILE", "QUORUM_STATE_FILE"]

QUORUM_STATE_FILE = "quorum-state"
"""Epoch and vote, replaced atomically."""
LOG_FILE = "metadata.log"
"""A header (the base offset), then one frame per entry."""
LOCK_FILE = ".lock"
"""``flock``-ed by the opener, against a second one."""
