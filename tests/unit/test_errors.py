"""Every error has Kafka's name and code, and a code maps back to its class."""

from __future__ import annotations

import re

import pytest

from cluster import errors
from cluster.errors import LograftError, UnknownServerError, error_for_code

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
