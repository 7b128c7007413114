"""The controller logic's errors carry Kafka's codes and retriability.

Every public name is checked in ``tests/unit/test_public_names.py``, their purity with every
other layer rule in ``tests/unit/test_layers.py``.
"""

from __future__ import annotations

import pytest

import controller.logic


@pytest.mark.parametrize(
    ("name", "code", "retriable"),
    [
        ("NotControllerError", 41, True),
        ("FencedLeaderEpochError", 74, True),
        ("StaleBrokerEpochError", 77, False),
        ("PreferredLeaderNotAvailableError", 80, True),
        ("ElectionNotNeededError", 84, False),
        ("InvalidUpdateVersionError", 95, False),
        ("UnknownTopicIdError", 100, True),
        ("DuplicateBrokerRegistrationError", 101, False),
        ("BrokerIdNotRegisteredError", 102, False),
        ("IneligibleReplicaError", 107, False),
    ],
)
def test_new_errors_carry_kafkas_codes(name: str, code: int, retriable: bool) -> None:
    cls = getattr(controller.logic, name)
    assert (cls.code, cls.retriable) == (code, retriable)
    assert str(cls("detail")).startswith(cls.error_name)
