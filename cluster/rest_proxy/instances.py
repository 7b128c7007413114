"""Consumer instances (Confluent's v2 consumers): one ``AsyncConsumer`` each, by group and name.

An instance is created by ``POST /consumers/{group}`` and lives in this proxy process until
it is deleted or sits unused for ``consumer.instance.timeout.ms``: the registry's expiry
task then closes it (it leaves its group). Requests to one instance run one at a time (its
lock), and an instance is never expired while a request uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from cluster.client import AsyncConsumer
from lograft.protocol.errors import LograftError

from .errors import (
    CONSUMER_ALREADY_EXISTS,
    CONSUMER_INSTANCE_NOT_FOUND,
    INVALID_CONSUMER_CONFIG,
    TOO_MANY_INSTANCES,
    RestError,
)
from .settings import ProxySettings

__all__ = ["ConsumerInstance", "InstanceOptions", "InstanceRegistry"]

logger = logging.getLogger(__name__)

_CLOSE_TIMEOUT_MS = 5_000


@dataclass(frozen=True, slots=True)
class InstanceOptions:
    """What ``POST /consumers/{group}`` asked for, validated."""

    name: str | None
    format: str
    auto_offset_reset: str
    auto_commit: bool


@dataclass(eq=False)
class ConsumerInstance:
    """One consumer instance: its consumer, embedded format, and when it was last used."""

    group: str
    instance_id: str
    format: str
    consumer: AsyncConsumer
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


INSTANCE_FETCH_MAX_BYTES = 4 * 1024 * 1024
"""The most record bytes one consumer instance fetches at once (``fetch.max.bytes``)."""


class InstanceRegistry:
    """The instances of this proxy, by ``(group, instance_id)``, and their expiry."""

    def __init__(self, settings: ProxySettings) -> None:
        self._settings = settings
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._expiry: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the expiry task on the running loop."""
        self._expiry = asyncio.get_running_loop().create_task(self._expire_forever())

    def create(self, group: str, options: InstanceOptions) -> ConsumerInstance:
        """A new instance (409 if the name is taken, 429 past ``max_consumer_instances``)."""
        instance_id = options.name or f"rest-consumer-{uuid.uuid4()}"
        key = (group, instance_id)
        if key in self._instances:
            raise RestError(
                409,
                CONSUMER_ALREADY_EXISTS,
                "Consumer with specified consumer ID already exists in the specified consumer "
                "group.",
            )
        if len(self._instances) >= self._settings.max_consumer_instances:
            raise RestError(
                429,
                TOO_MANY_INSTANCES,
                f"This proxy already has {len(self._instances)} consumer instances "
                "(its limit): delete some",
            )
        try:
            consumer = AsyncConsumer(
                {
                    "bootstrap.servers": self._settings.bootstrap_servers,
                    "group.id": group,
                    "client.id": instance_id,
                    "auto.offset.reset": options.auto_offset_reset,
                    "enable.auto.commit": options.auto_commit,
                    # What one instance may hold from the cluster at a time, so that the
                    # proxy's memory is bounded by its instance limit (Kafka's consumer
                    # default is 50 MiB a fetch).
                    "fetch.max.bytes": INSTANCE_FETCH_MAX_BYTES,
                    "max.partition.fetch.bytes": INSTANCE_FETCH_MAX_BYTES,
                }
            )
        except LograftError as exc:
            raise RestError(
                422, INVALID_CONSUMER_CONFIG, f"Invalid consumer configuration: {exc}"
            ) from None
        instance = ConsumerInstance(group, instance_id, options.format, consumer)
        self._instances[key] = instance
        logger.info(
            "consumer instance created group=%s instance=%s format=%s",
            group,
            instance_id,
            options.format,
        )
        return instance

    @contextlib.asynccontextmanager
    async def using(self, group: str, instance_id: str) -> AsyncIterator[ConsumerInstance]:
        """The instance, held for one request (404 / 40403 if there is none)."""
        instance = self._instances.get((group, instance_id))
        if instance is None:
            raise RestError(404, CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
        async with instance.lock:
            if self._instances.get((group, instance_id)) is not instance:
                raise RestError(404, CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
            instance.last_used = time.monotonic()
            try:
                yield instance
            finally:
                instance.last_used = time.monotonic()

    async def delete(self, group: str, instance_id: str) -> None:
        """Close and forget the instance (404 / 40403 if there is none)."""
        async with self.using(group, instance_id) as instance:
            del self._instances[(group, instance_id)]
            await self._close(instance, "deleted")

    async def _close(self, instance: ConsumerInstance, why: str) -> None:
        try:
            await instance.consumer.close(timeout_ms=_CLOSE_TIMEOUT_MS)
        except LograftError as exc:
            logger.warning(
                "consumer instance close failed group=%s instance=%s error=%s",
                instance.group,
                instance.instance_id,
                exc,
            )
        logger.info(
            "consumer instance closed group=%s instance=%s reason=%s",
            instance.group,
            instance.instance_id,
            why,
        )

    async def expire(self, now: float) -> int:
        """Close the instances idle past the timeout as of ``now``; returns how many."""
        idle_s = self._settings.consumer_instance_timeout_ms / 1000.0
        expired = [
            (key, instance)
            for key, instance in self._instances.items()
            if not instance.lock.locked() and now - instance.last_used >= idle_s
        ]
        for key, _ in expired:
            del self._instances[key]
        for _, instance in expired:
            await self._close(instance, "expired")
        return len(expired)

    async def _expire_forever(self) -> None:
        interval_s = min(max(self._settings.consumer_instance_timeout_ms / 4000.0, 0.05), 5.0)
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.expire(time.monotonic())
            except Exception:  # the task must outlive any one failure; it logs it
                logger.exception("consumer instance expiry failed")

    async def close_all(self) -> None:
        """Stop the expiry task and close every instance (at shutdown)."""
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        instances = list(self._instances.values())
        self._instances.clear()
        await asyncio.gather(*(self._close(i, "shutdown") for i in instances))
