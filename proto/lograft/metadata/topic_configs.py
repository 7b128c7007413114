"""Validation of topic configs, including those the controller reads itself.

The log's configs are defined and checked by
:data:`lograft.protocol.topic_config.TOPIC_CONFIGS`. The controller additionally reads
``unclean.leader.election.enable``, which that table does not define yet; it is accepted and
checked here until it is added there, and then that table's definition wins.
"""

from __future__ import annotations

from collections.abc import Mapping

from lograft.metadata.image import MetadataImage
from lograft.protocol.errors import InvalidConfigError
from lograft.protocol.topic_config import TOPIC_CONFIGS, LogConfig

__all__ = [
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "unclean_leader_election_enabled",
    "validate_topic_configs",
]

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
"""When true, a partition with no live ISR member takes any live replica as leader, which
may lose committed records. Off by default, as in Kafka."""

_BOOLEANS = {"true": "true", "false": "false"}


def validate_topic_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Check topic config overrides; return them as stored. Raises ``InvalidConfigError``."""
    checked: dict[str, str] = {}
    log_overrides: dict[str, str] = {}
    for name, value in configs.items():
        if not isinstance(value, str):
            raise InvalidConfigError(f"{name}: value must be a string")
        if name == UNCLEAN_LEADER_ELECTION_ENABLE and name not in TOPIC_CONFIGS:
            # Kafka parses booleans case-insensitively; store the canonical spelling.
            normalized = _BOOLEANS.get(value.strip().lower())
            if normalized is None:
                raise InvalidConfigError(f"{name}={value!r} is not valid: one of true, false")
            checked[name] = normalized
        else:
            log_overrides[name] = value
            checked[name] = value
    LogConfig().with_overrides(log_overrides)
    return checked


def unclean_leader_election_enabled(image: MetadataImage, topic_name: str) -> bool:
    """Whether the topic allows unclean leader election (default false)."""
    value = image.topic_configs(topic_name).get(UNCLEAN_LEADER_ELECTION_ENABLE, "false")
    return value.strip().lower() == "true"
