"""Old import path of :mod:`replica.topic_config`, kept while callers move (a pure module
now: the controller and the node config read it, and storage is above them)."""

from replica.topic_config import (
    MAX_LONG,
    TOPIC_CONFIGS,
    CleanupPolicy,
    ConfigDef,
    FlushPolicy,
    LogConfig,
)

__all__ = ["MAX_LONG", "TOPIC_CONFIGS", "CleanupPolicy", "ConfigDef", "FlushPolicy", "LogConfig"]
