"""Every error has Kafka's name and code, and a code maps back to its class."""

from __future__ import annotations

import re

import pytest

from lograft.protocol import errors
from lograft.protocol.errors import LograftError, UnknownServerError, error_for_code

ERROR_CLASSES = [
    cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, LograftError) and cls is not LograftError
]


def test_codes_and_names_are_unique() -> None:
    wire = [cls for cls in ERROR_CLASSES if cls.code >= -1]
    assert len({cls.code for cls in wire}) == len(wire)
    assert len({cls.error_name for cls in ERROR_CLASSES}) == len(ERROR_CLASSES)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.error_name)
def test_code_maps_back_to_the_class(cls: type[LograftError]) -> None:
    assert re.fullmatch(r"[A-Z_]+", cls.error_name)
    if cls.code >= -1:
        error = error_for_code(cls.code, "detail")
        assert type(error) is cls
        assert str(error) == f"{cls.error_name}: detail"


def test_unknown_code_is_unknown_server_error() -> None:
    assert isinstance(error_for_code(12345), UnknownServerError)


def test_kafka_codes_users_know() -> None:
    assert errors.NotLeaderOrFollowerError.code == 6
    assert errors.NotLeaderOrFollowerError.retriable
    assert errors.NotEnoughReplicasError.code == 19
    assert errors.CorruptMessageError.code == 2
    assert errors.OutOfOrderSequenceNumberError.code == 45
    assert not errors.OutOfOrderSequenceNumberError.retriable


def test_consumer_group_codes_match_kafka() -> None:
    """The group coordinator's errors carry Kafka's codes and retriable flags."""
    expected = {
        errors.OffsetMetadataTooLargeError: (12, "OFFSET_METADATA_TOO_LARGE", False),
        errors.CoordinatorLoadInProgressError: (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
        errors.CoordinatorNotAvailableError: (15, "COORDINATOR_NOT_AVAILABLE", True),
        errors.NotCoordinatorError: (16, "NOT_COORDINATOR", True),
        errors.IllegalGenerationError: (22, "ILLEGAL_GENERATION", False),
        errors.InvalidGroupIdError: (24, "INVALID_GROUP_ID", False),
        errors.UnknownMemberIdError: (25, "UNKNOWN_MEMBER_ID", False),
        errors.InvalidSessionTimeoutError: (26, "INVALID_SESSION_TIMEOUT", False),
        errors.GroupNotEmptyError: (68, "GROUP_NOT_EMPTY", False),
        errors.GroupIdNotFoundError: (69, "GROUP_ID_NOT_FOUND", False),
        errors.GroupMaxSizeReachedError: (81, "GROUP_MAX_SIZE_REACHED", False),
        errors.FencedMemberEpochError: (110, "FENCED_MEMBER_EPOCH", False),
        errors.UnsupportedAssignorError: (112, "UNSUPPORTED_ASSIGNOR", False),
        errors.StaleMemberEpochError: (113, "STALE_MEMBER_EPOCH", False),
        errors.UnassignedPartitionError: (134, "UNASSIGNED_PARTITION", False),
        errors.RebalanceInProgressError: (27, "REBALANCE_IN_PROGRESS", False),
        errors.GroupAuthorizationFailedError: (30, "GROUP_AUTHORIZATION_FAILED", False),
        errors.UnstableOffsetCommitError: (88, "UNSTABLE_OFFSET_COMMIT", True),
    }
    for cls, (code, name, retriable) in expected.items():
        assert (cls.code, cls.error_name, cls.retriable) == (code, name, retriable), cls
        assert cls.__name__ in errors.__all__
