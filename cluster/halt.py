"""Halting the node process on a broken invariant (Kafka's ``Exit.halt``, etcd's panic).

A pure core raises a subclass of :class:`~lograft.protocol.errors.InvariantError` when its state
breaks a safety rule (a high watermark moving back, a committed Raft entry about to be
truncated, a partition owned by two group members). Carrying on would risk serving or
replicating wrong data, so the process stops at once: the error and the state it names
are logged at CRITICAL, the log handlers are flushed, and the process exits with
:data:`HALT_EXIT_CODE` without running shutdown code (which could persist the bad state).

Three places can see such an error, and each is covered here:

* a task on the node's event loop: :func:`install` sets a task factory that adds a done
  callback to every task, and a loop exception handler for plain callbacks;
* a gRPC handler, whose exceptions grpc would otherwise turn into an ``UNKNOWN`` reply:
  :class:`HaltOnInvariantInterceptor` wraps every handler;
* code that catches broad exceptions to keep a loop alive re-raises it first
  (``except InvariantError: raise`` before ``except Exception``).

A partition log whose files an I/O error left in doubt halts the node too
(:func:`halt_on_log_failure`, exit status :data:`LOG_DIR_FAILURE_EXIT_CODE`), as Kafka stops
a broker whose every log directory went offline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine, Generator
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc

from lograft.protocol.errors import InvariantError

__all__ = [
    "HALT_EXIT_CODE",
    "LOG_DIR_FAILURE_EXIT_CODE",
    "HaltOnInvariantInterceptor",
    "halt",
    "halt_on_log_failure",
    "install",
]

log = logging.getLogger(__name__)

HALT_EXIT_CODE = 70
"""The exit status of a node halted by a broken invariant (``EX_SOFTWARE``)."""

T = TypeVar("T")


LOG_DIR_FAILURE_EXIT_CODE = 74
"""The exit status of a node halted because its data directory failed (``EX_IOERR``)."""


def halt(error: BaseException, where: str) -> NoReturn:
    """Log ``error`` (with its traceback) and end the process now, without cleanup."""
    log.critical(
        "invariant broken, halting node where=%s error_type=%s error=%s exit_code=%d",
        where,
        type(error).__name__,
        error,
        HALT_EXIT_CODE,
        exc_info=error,
    )
    _exit(HALT_EXIT_CODE)


def halt_on_log_failure(directory: Path, error: BaseException) -> NoReturn:
    """A partition's log met an I/O error that leaves its files in doubt: end the process.

    Kafka takes such a log directory offline and stops a broker that has no other; a
    lograft node has one data directory. Carrying on, it would keep leading the partition
    and answer ``KAFKA_STORAGE_ERROR`` to every write until someone restarted it; halted,
    its session with the controller lapses, a replica in the ISR takes over the partitions it
    led, and a restart recovers its logs from what they synced.
    """
    log.critical(
        "log directory failed, halting node dir=%s error_type=%s error=%s exit_code=%d",
        directory,
        type(error).__name__,
        error,
        LOG_DIR_FAILURE_EXIT_CODE,
        exc_info=error,
    )
    _exit(LOG_DIR_FAILURE_EXIT_CODE)


def _exit(code: int) -> NoReturn:
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # a broken handler must not stop the halt
            handler.flush()
    sys.stderr.flush()
    os._exit(code)


def _on_task_done(task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if isinstance(error, InvariantError):
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        halt(error, f"task {name}")


def _task_factory(
    loop: asyncio.AbstractEventLoop,
    coro: Generator[Any, None, T] | Coroutine[Any, Any, T],
    **kwargs: Any,
) -> asyncio.Task[T]:
    task: asyncio.Task[T] = asyncio.Task(coro, loop=loop, **kwargs)
    task.add_done_callback(_on_task_done)
    return task


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    error = context.get("exception")
    if isinstance(error, InvariantError):
        halt(error, str(context.get("message", "event loop callback")))
    loop.default_exception_handler(context)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Make every task and callback of ``loop`` halt the process on a broken invariant."""
    loop.set_task_factory(_task_factory)
    loop.set_exception_handler(_exception_handler)


class HaltOnInvariantInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Halts the process when a gRPC handler raises a broken invariant.

    Without it grpc catches the error and answers ``UNKNOWN``: the client would see a
    corrupted state as a retriable server error, and the node would carry on.
    """

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _guard_unary(handler.unary_unary, method),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # lograft's protocols have unary methods only


def _guard_unary(
    behaviour: Callable[[Any, Any], Awaitable[Any]], method: str
) -> Callable[[Any, Any], Awaitable[Any]]:
    async def guarded(request: Any, context: Any) -> Any:
        try:
            return await behaviour(request, context)
        except InvariantError as error:
            halt(error, f"rpc {method}")

    return guarded
