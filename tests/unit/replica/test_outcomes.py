"""replica.outcomes: each awaited item's failure, kept, in as few loop turns as possible."""

from __future__ import annotations

import asyncio

import pytest

from replica.outcomes import outcomes


async def _finish() -> None:
    return None


async def _fail(message: str) -> None:
    raise ValueError(message)


def test_each_item_gives_none_or_its_own_failure_in_order() -> None:
    results = asyncio.run(outcomes([_finish(), _fail("second"), _finish(), _fail("fourth")]))
    assert [None if r is None else str(r) for r in results] == [None, "second", None, "fourth"]


def test_one_failing_item_gives_its_failure() -> None:
    (result,) = asyncio.run(outcomes([_fail("alone")]))
    assert isinstance(result, ValueError) and str(result) == "alone"


def test_one_item_that_does_not_suspend_finishes_before_the_loop_runs_anything_else() -> None:
    async def scenario() -> list[str]:
        order: list[str] = []
        asyncio.get_running_loop().call_soon(order.append, "other ready work")
        await outcomes([_finish()])
        order.append("outcome")
        return order

    assert asyncio.run(scenario()) == ["outcome", "other ready work"]


def test_a_cancelled_caller_is_cancelled_not_given_an_outcome() -> None:
    async def scenario() -> None:
        task = asyncio.ensure_future(outcomes([asyncio.sleep(60)]))
        await asyncio.sleep(0)
        task.cancel()
        await task

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(scenario())
