"""What every handler shares: the settings, the clients, and short-lived metadata caches.

The proxy talks to the cluster only through :mod:`cluster.client`: one ``AsyncProducer`` for
every produce request, one ``AdminClient`` (synchronous, so its calls run on a small thread
pool off the event loop) for metadata, and an ``AsyncConsumer`` per consumer instance
(:mod:`cluster.rest_proxy.instances`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from aiohttp import web

from cluster.client import AdminClient, AsyncProducer, TopicDescription
from lograft.protocol.errors import LograftError

from .errors import NOT_FOUND, PARTITION_NOT_FOUND, TOPIC_NOT_FOUND, RestError, from_lograft
from .instances import InstanceRegistry
from .settings import ProxySettings

__all__ = ["CONTEXT", "TOPIC_CACHE_S", "ProxyContext"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

TOPIC_CACHE_S = 5.0
"""How long a topic's partition count is trusted before it is looked up again."""


class ProxyContext:
    """The proxy's clients and caches; built by ``start`` and released by ``close``."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rest-proxy-admin")
        client = {"bootstrap.servers": settings.bootstrap_servers}
        self.admin = AdminClient(client, default_api_timeout_ms=settings.admin_timeout_ms)
        # A send waits for metadata at most as long as an admin call (not Kafka's 60 s).
        self.producer = AsyncProducer(
            client,
            client_id="lograft-rest-proxy",
            acks="all",
            max_block_ms=settings.admin_timeout_ms,
        )
        self.instances = InstanceRegistry(settings)
        self._partition_counts: dict[str, tuple[int, float]] = {}
        self._cluster_id: str | None = None

    async def start(self) -> None:
        """Start the consumer instances' expiry task (the clients connect on first use)."""
        self.instances.start()

    async def close(self) -> None:
        """Close every consumer instance, then the producer (flushing it) and the admin."""
        await self.instances.close_all()
        try:
            await self.producer.close()
        except LograftError as exc:
            logger.warning("producer close failed error=%s", exc)
        await self.admin_call(self.admin.close)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def admin_call(self, fn: Callable[..., _T], *args: object) -> _T:
        """``fn(*args)`` on the admin thread pool; a typed error becomes a :class:`RestError`."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args))
        except LograftError as exc:
            raise from_lograft(exc) from None

    async def cluster_id(self) -> str:
        """The cluster's id (asked once, then remembered)."""
        if self._cluster_id is None:
            description = await self.admin_call(self.admin.describe_cluster)
            self._cluster_id = description.cluster_id
        return self._cluster_id

    async def check_cluster(self, cluster_id: str) -> str:
        """``cluster_id`` if it is this cluster's, else 404."""
        if cluster_id != await self.cluster_id():
            raise RestError(404, NOT_FOUND, f"Cluster {cluster_id} cannot be found.")
        return cluster_id

    async def describe_topic(self, topic: str) -> TopicDescription:
        """The topic's description, 404 (40401) if it does not exist."""
        try:
            descriptions = await self.admin_call(self.admin.describe_topics, [topic])
        except RestError as exc:
            if exc.code == TOPIC_NOT_FOUND:
                raise RestError(404, TOPIC_NOT_FOUND, f"Topic {topic} not found.") from None
            raise
        description = descriptions[0]
        self._partition_counts[topic] = (len(description.partitions), time.monotonic())
        return description

    async def partition_count(self, topic: str) -> int:
        """The topic's partition count (cached for ``TOPIC_CACHE_S``); 404 if no such topic."""
        cached = self._partition_counts.get(topic)
        if cached is not None and time.monotonic() - cached[1] < TOPIC_CACHE_S:
            return cached[0]
        return len((await self.describe_topic(topic)).partitions)

    async def check_partition(self, topic: str, partition: int | None) -> None:
        """404 (40401/40402) unless the topic exists and has ``partition`` (if given)."""
        count = await self.partition_count(topic)
        if partition is not None and partition >= count:
            raise RestError(
                404, PARTITION_NOT_FOUND, f"Partition {partition} of topic {topic} not found."
            )


CONTEXT = web.AppKey("context", ProxyContext)
"""Where the application keeps its :class:`ProxyContext`."""
