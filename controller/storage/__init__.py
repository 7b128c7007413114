"""Durable storage for the controller's Raft metadata log (the core's ``Storage``, on disk).

See :mod:`controller.storage.disk_storage` for the directory layout, the write order and
recovery, and :mod:`controller.storage.formats` for the byte formats.
"""

from controller.storage.disk_storage import DiskStorage
from controller.storage.formats import (
    MAX_ENTRY_BYTES,
    MAX_SNAPSHOT_BYTES,
    CorruptMetadataStorageError,
)

__all__ = [
    "MAX_ENTRY_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "CorruptMetadataStorageError",
    "DiskStorage",
]
