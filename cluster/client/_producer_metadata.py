"""What the producer knows of its topics (Kafka's ``ProducerMetadata``).

It remembers every topic the producer sends to, so that one refresh covers them all and none
keeps an old partition count. ``send`` asks it for a topic's partition count: an unknown
topic (or an explicit partition beyond the known count) is looked up at once, waiting up to
``max.block.ms`` (Kafka's ``waitOnMetadata``); metadata older than ``metadata.max.age.ms``
is refreshed on a background thread while the send goes on with what is known. The sender
thread asks for a refresh (``update_wanted``) after leadership errors and performs it at
most once per ``retry.backoff.ms``.

Thread-safety: ``topics`` and the background-refresh flag are guarded by the producer's
lock (given); ``update_wanted`` and ``refresh`` belong to the sender thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from lograft.protocol.errors import LograftError, UnknownTopicOrPartitionError

from ._clock import Clock
from ._connection import Connections

__all__ = ["ProducerMetadata"]

log = logging.getLogger(__name__)


class ProducerMetadata:
    """The producer's topics and metadata refreshes; see the module docstring."""

    def __init__(
        self,
        conn: Connections,
        lock: threading.Lock,
        clock: Clock,
        *,
        max_block_s: float,
        backoff_s: float,
    ) -> None:
        self._conn = conn
        self._lock = lock
        self._clock = clock
        self._max_block_s = max_block_s
        self._backoff_s = backoff_s
        self.topics: set[str] = set()
        """Every topic sent to; under the lock."""
        self.update_wanted = False
        """The sender wants fresh metadata (a leader is unknown or moved)."""
        self._updated_at = float("-inf")
        self._background_refresh = False
        self._closed = False

    def close(self) -> None:
        """No background refresh starts after this; call it under the lock."""
        self._closed = True

    # ---- caller threads -------------------------------------------------------------------

    def partition_count(self, topic: str, partition: int | None = None) -> int:
        """The topic's partition count as last seen.

        Older than ``metadata.max.age.ms``, the metadata of every topic this producer sends
        to is refreshed on a background thread while this send goes on with what is known
        (so added partitions are picked up without ever blocking a send or the sender). An
        unknown topic, or an explicit ``partition`` beyond the known count, is looked up at
        once, waiting up to ``max.block.ms`` (Kafka's waitOnMetadata); a partition still
        missing then is for the caller to refuse.
        """
        if topic not in self.topics:
            with self._lock:
                self.topics.add(topic)
        count = self._conn.metadata.partition_count(topic)
        if count is not None and (partition is None or partition < count):
            if self._conn.metadata_is_stale():
                self._refresh_in_background()
            return count
        deadline = self._clock.monotonic() + self._max_block_s
        snapshot = self._conn.wait_for_topic(topic, int(self._max_block_s * 1000))
        count = snapshot.partition_count(topic)
        while count is not None and partition is not None and partition >= count:
            if self._clock.monotonic() + self._backoff_s >= deadline:
                break
            self._clock.sleep(self._backoff_s)  # retry.backoff.ms between lookups, as Kafka
            try:
                count = self._conn.refresh_metadata([topic]).partition_count(topic)
            except LograftError as exc:
                if not exc.retriable:
                    raise
        if count is None:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partitions")
        return count

    def refresh_if_stale(self) -> None:
        """Refresh the known topics on a background thread once the metadata is older than
        ``metadata.max.age.ms`` (the sender asks each turn, as Kafka's sender does, so that
        ``send`` need not look at the clock for it)."""
        if self.topics and self._conn.metadata_is_stale():
            self._refresh_in_background()

    def _refresh_in_background(self) -> None:
        with self._lock:
            if self._background_refresh or self._closed:
                return
            self._background_refresh = True
        threading.Thread(
            target=self._refresh_known_topics, name="lograft-producer-metadata", daemon=True
        ).start()

    def _refresh_known_topics(self) -> None:
        try:
            with self._lock:
                topics = set(self.topics)
            self._conn.refresh_metadata(topics)
        except LograftError as exc:
            log.info("periodic metadata refresh failed error=%s", exc.error_name)
        except ValueError:
            # gRPC's "closed channel": the producer closed while this refresh was under way.
            if not self._closed:
                raise
        finally:
            with self._lock:
                self._background_refresh = False

    # ---- sender thread --------------------------------------------------------------------

    def refresh(self, queued_topics_locked: Callable[[], set[str]]) -> None:
        """Refresh the known topics and those ``queued_topics_locked`` gives (called under
        the lock), unless the last refresh was within ``retry.backoff.ms``."""
        now = self._clock.monotonic()
        if now - self._updated_at < self._backoff_s:
            return
        self._updated_at = now
        with self._lock:
            topics = self.topics | queued_topics_locked()
        try:
            self._conn.refresh_metadata(topics or None)
            self.update_wanted = False
        except LograftError as exc:
            log.info("metadata refresh failed error=%s", exc.error_name)
