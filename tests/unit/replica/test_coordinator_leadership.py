"""When a coordinator may answer (:mod:`replica.coordinator_leadership`), row by row of its
table, for both the group and the transaction coordinator: only while its broker leads its
partition at the leader epoch it was loaded for."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import pytest

from lograft.protocol.errors import (
    CoordinatorLoadInProgressError,
    LograftError,
    NotCoordinatorError,
)
from replica.group import GroupCoordinator, GroupLoggers
from replica.txn import TransactionCoordinator

# The cores' logger in these tests (their shells pass the real ones).
CORE_LOG = logging.getLogger(__name__)
GROUP_LOGGERS = GroupLoggers(CORE_LOG, CORE_LOG, CORE_LOG)

LOADED_AT = 7
Check = Callable[[int | None], None]


def _group(*, loaded: bool) -> Check:
    coordinator = GroupCoordinator(
        random.Random(1), partition=3, leader_epoch=LOADED_AT, loggers=GROUP_LOGGERS
    )
    if loaded:
        coordinator.complete_load({}, now_ms=0)
    return coordinator.check_leadership


def _txn(*, loaded: bool) -> Check:
    coordinator = TransactionCoordinator(3, LOADED_AT, logger=CORE_LOG)
    if loaded:
        coordinator.complete_load()
    return coordinator.check_leadership


COORDINATORS = pytest.mark.parametrize("make", [_group, _txn], ids=["group", "transaction"])


@COORDINATORS
@pytest.mark.parametrize("loaded", [False, True], ids=["loading", "loaded"])
@pytest.mark.parametrize(
    ("leader_epoch", "refusal"),
    [
        (None, NotCoordinatorError),  # the broker no longer leads the partition
        (LOADED_AT - 1, NotCoordinatorError),
        (LOADED_AT + 1, CoordinatorLoadInProgressError),  # led again: a new one loads
    ],
    ids=["not-led", "older-epoch", "newer-epoch"],
)
def test_a_coordinator_answers_nothing_outside_the_leadership_it_was_loaded_for(
    make: Callable[..., Check],
    loaded: bool,
    leader_epoch: int | None,
    refusal: type[LograftError],
) -> None:
    check = make(loaded=loaded)
    with pytest.raises(refusal) as refused:
        check(leader_epoch)
    assert refused.value.retriable


@COORDINATORS
def test_within_its_leadership_a_coordinator_answers_once_loaded(
    make: Callable[..., Check],
) -> None:
    with pytest.raises(CoordinatorLoadInProgressError):
        make(loaded=False)(LOADED_AT)
    make(loaded=True)(LOADED_AT)  # answers: nothing raised


def test_a_closed_group_coordinator_answers_nothing_even_at_its_epoch() -> None:
    coordinator = GroupCoordinator(
        random.Random(1), partition=3, leader_epoch=LOADED_AT, loggers=GROUP_LOGGERS
    )
    coordinator.complete_load({}, now_ms=0)
    coordinator.close()
    with pytest.raises(NotCoordinatorError):
        coordinator.check_leadership(LOADED_AT)
