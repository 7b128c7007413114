"""How a consumer's partitions get their positions, and its metadata stays fresh.

A partition without a position first waits for its group's committed offset (with
``group.id``), then for the offset its reset asks for (``seek_to_beginning``,
``seek_to_end`` or ``auto.offset.reset``: ``ListOffsets``); until then it has no records.
``poll`` never waits for these lookups: ``start`` runs them, and metadata refreshes, on a
background pool, and each finished ``Lookup`` comes back through the consumer's response
queue to ``handle``, which applies the answer to the partitions whose state (epoch) has not
moved since. Offsets are asked of each leader on its own, and the others get their
positions (and records) meanwhile: a partition without a known leader is looked up once
fresh metadata (refreshed at most every ``retry.backoff.ms``) names one, one whose leader
did not answer again after ``retry.backoff.ms``. ``position`` uses the blocking forms,
``load_committed`` and ``resolve_positions``.

Retry backoffs are counted on the consumer's ``Clock``; the blocking lookups of
``Connections`` (and every gRPC deadline) stay on real time.

Not thread-safe: the consumer's polling thread owns it (only the lookups themselves run on
the pool).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from lograft.protocol.errors import LograftError

from ._clock import Clock
from ._connection import Connections, TopicPartition
from ._group_client import CoordinatorClient
from ._list_offsets import list_offsets, list_offsets_at
from ._rpc_errors import retried_in_background
from ._subscription import PartitionState, SubscriptionState

__all__ = ["Lookup", "Lookups"]

logger = logging.getLogger(__name__)

_LOOKUP_THREADS = 8
"""At most this many lookups run at once; more wait for a thread."""


@dataclass(slots=True)
class Lookup:
    """A lookup run off the polling thread, so that ``poll`` never waits for it."""

    kind: Literal["committed", "offsets", "metadata"]
    epochs: dict[TopicPartition, int]
    """tp → state epoch at the time of the request: a seek since makes the answer stale."""
    future: Future[Any]


class Lookups:
    """The position and metadata lookups of one consumer; see the module docstring.

    ``respond`` queues a finished ``Lookup`` for the polling thread (called on a pool
    thread); ``coordinator`` is ``None`` without ``group.id`` (no committed offsets).
    """

    def __init__(
        self,
        conn: Connections,
        subscriptions: SubscriptionState,
        coordinator: CoordinatorClient | None,
        *,
        respond: Callable[[Lookup], None],
        request_timeout_ms: int,
        backoff_s: float,
        group_id: str | None,
        clock: Clock,
        isolation_level: int = 0,
    ) -> None:
        self._conn = conn
        self._isolation_level = isolation_level
        self._clock = clock
        self._subscriptions = subscriptions
        self._coordinator = coordinator
        self._respond = respond
        self._request_timeout_ms = request_timeout_ms
        self._backoff_s = backoff_s
        self._group_id = group_id
        self.metadata_wanted = False
        """Something needs fresher metadata: ``poll`` calls ``refresh_metadata``."""
        self._metadata_at = 0.0
        self._metadata_refreshing = False
        self._pool: ThreadPoolExecutor | None = None

    def want_metadata(self) -> None:
        """Ask for a metadata refresh at the next ``poll`` round."""
        self.metadata_wanted = True

    def start(self) -> None:
        """Look up the committed offsets, then the reset positions, of unpositioned partitions.

        In the background: the answers come through ``respond``.
        """
        now = self._clock.monotonic()
        committed: dict[TopicPartition, int] = {}
        resets: dict[TopicPartition, int] = {}
        epochs: dict[TopicPartition, int] = {}
        for tp, state in self._subscriptions.states.items():
            if state.position is not None or state.lookup or state.retry_at > now:
                continue
            if state.committed_pending:
                committed[tp] = state.epoch
            else:
                resets[tp] = self._subscriptions.reset_spec(tp, state)
                epochs[tp] = state.epoch
        coordinator = self._coordinator
        if committed and coordinator is not None:
            wanted = list(committed)
            timeout_ms = self._request_timeout_ms
            self._submit(
                "committed", committed, lambda: coordinator.fetch_offsets(wanted, timeout_ms)
            )
        if resets:
            self._start_offsets(resets, epochs, now)

    def _start_offsets(
        self, resets: dict[TopicPartition, int], epochs: dict[TopicPartition, int], now: float
    ) -> None:
        """One ``ListOffsets`` lookup per leader, as Kafka's ``OffsetFetcher`` sends them: a
        partition without a known leader waits for fresh metadata (asked for here; it is
        tried again at every ``start``, as the fetcher does), and one whose leader is slow
        or down holds up no other."""
        states = self._subscriptions.states
        metadata = self._conn.metadata
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, spec in resets.items():
            try:
                leader = metadata.leader_for(tp)
            except LograftError as exc:
                if not exc.retriable:
                    raise
                states[tp].note_stalled(now, str(exc))
                self.metadata_wanted = True
                continue
            by_leader.setdefault(leader, {})[tp] = spec
        conn, timeout_ms = self._conn, self._request_timeout_ms
        for leader, asked in by_leader.items():
            work = functools.partial(
                list_offsets_at,
                conn,
                leader,
                asked,
                timeout_ms,
                isolation_level=self._isolation_level,
            )
            self._submit("offsets", {tp: epochs[tp] for tp in asked}, work)

    def refresh_metadata(self) -> None:
        """Refresh the metadata in the background (one refresh at a time)."""
        now = self._clock.monotonic()
        if self._metadata_refreshing or now - self._metadata_at < self._backoff_s:
            return
        self._metadata_at = now
        self._metadata_refreshing = True
        self.metadata_wanted = False  # set again if the refresh fails
        conn = self._conn
        topics = {tp.topic for tp in self._subscriptions.states} or None
        self._submit("metadata", {}, lambda: conn.refresh_metadata(topics))

    def _submit(
        self,
        kind: Literal["committed", "offsets", "metadata"],
        epochs: dict[TopicPartition, int],
        work: Callable[[], Any],
    ) -> None:
        if self._pool is None:
            # Threads start as lookups need them: few committed-offset and metadata lookups
            # are in flight at a time, offset lookups one per leader (a leader that does
            # not answer holds a thread until the call's deadline, not the others).
            self._pool = ThreadPoolExecutor(
                max_workers=_LOOKUP_THREADS, thread_name_prefix="lograft-consumer-lookup"
            )
        states = self._subscriptions.states
        for tp in epochs:
            states[tp].lookup = True
        lookup = Lookup(kind, epochs, self._pool.submit(work))
        lookup.future.add_done_callback(lambda _done: self._respond(lookup))

    def handle(self, lookup: Lookup) -> None:
        """Apply a finished lookup to the partitions it is still current for."""
        live: dict[TopicPartition, PartitionState] = {}
        for tp, epoch in lookup.epochs.items():
            state = self._subscriptions.states.get(tp)
            if state is not None and state.epoch == epoch:
                state.lookup = False
                live[tp] = state
        if lookup.kind == "metadata":
            self._metadata_refreshing = False
        if lookup.future.cancelled():
            return
        try:
            found = lookup.future.result()
        except LograftError as exc:
            if lookup.kind == "metadata":
                self.metadata_wanted = True
                logger.info("metadata refresh failed error=%s", exc.error_name)
                return
            # A lookup runs in the background, as a heartbeat does: no broker answering is
            # an outage to outlast, not an error for poll() to raise.
            if not retried_in_background(exc):
                raise
            logger.info(
                "position lookup failed, retrying kind=%s group=%s partitions=%d error=%s",
                lookup.kind,
                self._group_id,
                len(live),
                exc,
            )
            now = self._clock.monotonic()
            for state in live.values():
                state.retry_at = now + self._backoff_s
                if lookup.kind == "offsets":
                    state.note_stalled(now, str(exc))
            if lookup.kind == "offsets":
                self.metadata_wanted = True
            return
        if lookup.kind == "committed":
            self._subscriptions.apply_committed({tp: found[tp] for tp in live if tp in found})
        elif lookup.kind == "offsets":
            offsets, failed = found
            for tp in live:
                if tp in offsets:
                    live[tp].note_answered()
            self._subscriptions.apply_offsets({tp: offsets[tp][0] for tp in live if tp in offsets})
            self._retry_offsets({tp: failed[tp] for tp in live if tp in failed})

    def _retry_offsets(self, failed: dict[TopicPartition, LograftError]) -> None:
        """Look these partitions up again after ``retry.backoff.ms``, with fresh metadata."""
        if not failed:
            return
        states = self._subscriptions.states
        now = self._clock.monotonic()
        for tp, error in failed.items():
            state = states[tp]
            state.retry_at = now + self._backoff_s
            state.note_stalled(now, str(error))
            logger.info(
                "offset lookup failed, retrying topic=%s partition=%d error=%s",
                tp.topic,
                tp.partition,
                error,
            )
        self.metadata_wanted = True

    def load_committed(self, partitions: Sequence[TopicPartition], timeout_ms: int) -> None:
        """Start partitions still waiting for it at their committed offset (if any), now."""
        states = self._subscriptions.states
        pending = [
            tp
            for tp in partitions
            if (state := states.get(tp)) is not None and state.committed_pending
        ]
        if not pending or self._coordinator is None:
            return
        self._subscriptions.apply_committed(self._coordinator.fetch_offsets(pending, timeout_ms))

    def resolve_positions(self, partitions: Sequence[TopicPartition]) -> None:
        """Look up the reset positions of ``partitions`` now (blocking)."""
        wanted: dict[TopicPartition, int] = {}
        for tp in partitions:
            state = self._subscriptions.states[tp]
            if state.position is not None or state.committed_pending:
                continue
            wanted[tp] = self._subscriptions.reset_spec(tp, state)
        if not wanted:
            return
        found = list_offsets(self._conn, wanted, self._request_timeout_ms, self._isolation_level)
        self._subscriptions.apply_offsets({tp: offset for tp, (offset, _, _) in found.items()})

    def close(self) -> None:
        """Stop the pool: lookups not started are cancelled, running ones are abandoned."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
