"""The asyncio shell around the pure Raft core: ticks, gRPC I/O, durable storage, applying.

One ``RaftDriver`` per node (voter or observer). It owns the ``RaftNode`` and is its only
caller, from the event loop. Each cycle follows the core's contract (``controller.raft.node``):

1. make the ticks that have elapsed -- but never past the first tick the core says may act
   (``ticks_until_due``): time the loop could not give the core (a stall) is not made up
   at once, as with a periodic ticker; and the first cycle after a stall stops one tick
   short of acting (:class:`LoopTicks`), so that what peers sent meanwhile is stepped
   before a timeout is judged -- then step every message received since the last
   cycle. The only timer is armed for that first tick that may act, so an idle node wakes
   for its long polls and timeouts, not every ``tick_ms``;
2. take the ``Ready``; persist it with ``storage.write`` on the driver's own writer thread
   (it fsyncs; a thread of its own, so the write never queues behind other blocking work of
   the node in the loop's default executor);
3. only then send its messages — those for a peer whose ``Step`` call is waiting for an
   answer go back in that call's reply, the rest go out as new ``Step`` calls. A call whose
   ``FetchRequest`` the core holds (long poll) stays open across cycles until the core
   answers it, up to ``STEP_TIMEOUT_S`` (well above any max wait), and a newer call from
   the same peer releases it (empty): a peer waits on one call at most;
4. apply committed entries (or a snapshot) to the state machine; complete proposals;
5. ``advance``.

Faults for tests are injected in :class:`RaftTransport` (drop messages to or from nodes).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import grpc

from controller.quorum.wire import MalformedRaftMessageError, from_envelope, to_envelope
from controller.raft import (
    Entry,
    EntryKind,
    FetchRequest,
    NotLeaderError,
    RaftConfig,
    RaftMessage,
    RaftNode,
    RaftStatus,
    Ready,
    Role,
    Snapshot,
    Storage,
)
from lograft.protocol.errors import LograftError, NetworkError, NotControllerError
from lograft.protocol.framed.peer import PeerChannel
from lograft.protocol.wire import raft_pb2 as pb
from lograft.protocol.wire import raft_pb2_grpc as pb_grpc

__all__ = ["LoopTicks", "RaftDriver", "RaftStorage", "RaftTransport", "StateMachine"]

log = logging.getLogger(__name__)

#: How long a Step call waits for the core's answer; above the longest fetch max wait.
STEP_TIMEOUT_S = 2.0
#: Timers may fire this early; a tick this close to due counts as due.
TICK_SLACK_S = 1e-6
#: A metadata log write (with its fsync) this slow is logged.
SLOW_WRITE_S = 0.2
#: A cycle this late (event loop time past its due tick) follows a stall of the loop.
STALL_S = 0.2
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # gRPC backs off reconnecting up to minutes; a restarted peer must be reachable within
    # an election timeout, so retry connecting quickly.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]


class RaftStorage(Storage, Protocol):
    """What the driver needs of storage: the core's read side plus a durable write."""

    def write(self, ready: Ready) -> None:
        """Persist (and fsync) what ``ready`` asks; called on a worker thread."""
        ...


class StateMachine(Protocol):
    """The application the log drives (the metadata image)."""

    def apply(self, entries: Sequence[Entry]) -> None:
        """Apply committed entries in offset order."""
        ...

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the state with a snapshot's image (installed from the leader)."""
        ...

    def snapshot_image(self) -> tuple[int, bytes] | None:
        """``(end_offset, image)`` when a snapshot is due, else ``None``."""
        ...


class RaftTransport:
    """Step calls to peers (framed, or gRPC to a peer that speaks only that), with fault
    injection for tests.

    ``blocked`` holds node ids whose messages are dropped in both directions, as a cut
    network link would.
    """

    def __init__(self, node_id: int, addresses: Mapping[int, str]) -> None:
        self.node_id = node_id
        self.addresses = dict(addresses)
        self.blocked: set[int] = set()
        self._channels: dict[int, PeerChannel] = {}

    def channel(self, node_id: int) -> PeerChannel | None:
        """The channel to ``node_id``, opened on first use; ``None`` without an address."""
        address = self.addresses.get(node_id)
        if address is None:
            return None
        channel = self._channels.get(node_id)
        if channel is None:
            channel = PeerChannel(
                address,
                pb_grpc.RaftStub,
                max_message_bytes=MAX_MESSAGE_BYTES,
                connect_timeout_s=STEP_TIMEOUT_S,
                grpc_options=CHANNEL_OPTIONS,
            )
            self._channels[node_id] = channel
        return channel

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


@dataclass(slots=True)
class _Inbound:
    message: RaftMessage
    reply: asyncio.Future[list[RaftMessage]] | None
    rejected: str = ""
    #: What the core produced for the sender while this call waited.
    answers: list[RaftMessage] = field(default_factory=list)


@dataclass(slots=True)
class _Proposal:
    epoch: int
    future: asyncio.Future[int] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class LoopTicks:
    """How many of the core's ticks the event loop's time is worth, cycle by cycle.

    Ticks are made for the time passed, but never past the first that may act
    (``until_due``). After a stall of the loop -- a cycle that starts ``STALL_S`` or more
    late, because the machine was busy or a callback ran long -- the first cycle stops one
    tick short of acting: the messages peers sent while this node could not run are stepped
    first, so a follower whose loop stalled hears its leader's answers before its election
    timeout is judged, and a leader hears its voters before its quorum check. Only one cycle
    in a row is held back, so a node stalled again and again still acts a tick later.
    """

    def __init__(self, tick_s: float, now: float) -> None:
        self.tick_s = tick_s
        self.next_tick_at = now + tick_s
        """When the next tick falls due (event loop time); ticks before it have been made."""
        self._held_back = False

    def take(self, now: float, until_due: int) -> int:
        """The ticks to make at ``now``, when the first that may act is ``until_due`` ticks
        away (>= 1)."""
        if now < self.next_tick_at - TICK_SLACK_S:
            return 0
        elapsed = 1 + int((now - self.next_tick_at + TICK_SLACK_S) / self.tick_s)
        limit = until_due
        stalled = now - self.due_at(until_due) >= STALL_S
        if stalled and not self._held_back and elapsed >= until_due:
            limit = until_due - 1
            self._held_back = True
        else:
            self._held_back = False
        ticks = min(elapsed, limit)
        if ticks == elapsed:
            self.next_tick_at += ticks * self.tick_s
        else:
            self.next_tick_at = now + self.tick_s
        return ticks

    def due_at(self, until_due: int) -> float:
        """When the first tick that may act falls due (event loop time)."""
        return self.next_tick_at + (until_due - 1) * self.tick_s


class RaftDriver(pb_grpc.RaftServicer):  # type: ignore[misc]
    """Runs one ``RaftNode``; also the gRPC servicer of the ``Raft`` service."""

    def __init__(
        self,
        config: RaftConfig,
        storage: RaftStorage,
        transport: RaftTransport,
        state_machine: StateMachine,
        rng: random.Random,
        tick_ms: int = 50,
        on_ready: Callable[[Ready], None] | None = None,
    ) -> None:
        self.config = config
        self._storage = storage
        self._writer = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"raft-log-{config.node_id}"
        )
        self._transport = transport
        self._state_machine = state_machine
        # The core logs its role changes and votes to the logger it is given (it has none of
        # its own); this one keeps the name operators filter on.
        self._node = RaftNode(config, storage, rng, logging.getLogger("controller.raft"))
        self._ticks = LoopTicks(tick_ms / 1000, 0.0)
        self._on_ready = on_ready
        self._inbound: list[_Inbound] = []
        #: The Step call each peer waits on, by peer: its answers go back in its reply.
        self._calls: dict[int, _Inbound] = {}
        self._tick_timer: asyncio.TimerHandle | None = None
        self._wakeup = asyncio.Event()
        self._proposals: dict[int, _Proposal] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._sends: set[asyncio.Task[None]] = set()
        self._role = self._node.status().role
        self._stopped = False

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Start ticking and processing."""
        self._ticks = LoopTicks(self._ticks.tick_s, asyncio.get_running_loop().time())
        self._tasks = [asyncio.create_task(self._run(), name=f"raft-{self.config.node_id}")]
        self._arm_tick_timer()

    async def stop(self) -> None:
        """Stop processing; pending proposals fail with ``NOT_CONTROLLER``."""
        self._stopped = True
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        for task in (*self._tasks, *self._sends):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._sends, return_exceptions=True)
        # A write the cancelled cycle started finishes before the storage may be closed.
        await asyncio.to_thread(self._writer.shutdown, wait=True)
        self._fail_proposals("the node is stopping")
        await self._transport.close()

    # ---- what callers use ---------------------------------------------------------------

    def status(self) -> RaftStatus:
        """The core's view: role, epoch, leader, offsets, replica lag on the leader."""
        return self._node.status()

    @property
    def transport(self) -> RaftTransport:
        """The transport, whose ``blocked`` set tests use to cut links."""
        return self._transport

    @property
    def node(self) -> RaftNode:
        """The core, for reads only (status, offsets); never step or propose through it."""
        return self._node

    async def propose(self, data: bytes) -> int:
        """Append ``data`` to the log; return its offset once committed and applied.

        Raises ``NotControllerError`` (retriable) when this node is not the leader or loses
        leadership before the entry commits.
        """
        try:
            offset = self._node.propose(data)
        except NotLeaderError as exc:
            raise NotControllerError(str(exc)) from None
        proposal = _Proposal(self._node.status().epoch)
        self._proposals[offset] = proposal
        self._wakeup.set()
        return await proposal.future

    # ---- gRPC service -------------------------------------------------------------------

    async def Step(
        self, request: pb.RaftEnvelope, context: grpc.aio.ServicerContext | None
    ) -> pb.RaftReply:
        """Step one message; answer with what the core produced for its sender.

        Served over gRPC (``context``) and as a framed call (no context)."""
        try:
            message = from_envelope(request)
        except MalformedRaftMessageError as exc:
            log.warning("rejected raft message src=%d reason=%s", request.src, exc)
            return pb.RaftReply(rejected=str(exc))
        if message.src in self._transport.blocked or self._stopped:
            if context is not None:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "link cut")
            raise NetworkError("link cut")
        reply: asyncio.Future[list[RaftMessage]] = asyncio.get_running_loop().create_future()
        item = _Inbound(message, reply)
        self._inbound.append(item)
        self._wakeup.set()
        try:
            async with asyncio.timeout(STEP_TIMEOUT_S):
                answers = await reply
        except TimeoutError:
            answers = []
        return pb.RaftReply(messages=[to_envelope(m) for m in answers], rejected=item.rejected)

    # ---- the loop -----------------------------------------------------------------------

    def _make_elapsed_ticks(self) -> None:
        """Tick the core for the time passed, up to the first tick that may act (see
        :class:`LoopTicks`)."""
        now = asyncio.get_running_loop().time()
        for _ in range(self._ticks.take(now, self._node.ticks_until_due())):
            self._node.tick()

    def _arm_tick_timer(self) -> None:
        """Wake the loop when the first tick that may act falls due."""
        when = self._ticks.due_at(self._node.ticks_until_due())
        if self._tick_timer is not None:
            self._tick_timer.cancel()
        self._tick_timer = asyncio.get_running_loop().call_at(when, self._wakeup.set)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            await self._cycle()

    async def _cycle(self) -> None:
        # The ticks that elapsed before these messages arrived come first: a message is
        # stamped with the core's tick count (a fetch is when its voter was last heard from).
        self._make_elapsed_ticks()
        inbound, self._inbound = self._inbound, []
        for item in inbound:
            rejection = self._node.step(item.message)
            if rejection is not None:
                log.warning(
                    "raft message refused node_id=%d src=%d type=%s error=%s detail=%s",
                    self.config.node_id,
                    item.message.src,
                    type(item.message).__name__,
                    rejection.error.name,
                    rejection.detail,
                )
                item.rejected = f"{rejection.error.name}: {rejection.detail}"
            if item.reply is not None:
                older = self._calls.get(item.message.src)
                if older is not None:
                    self._finish_call(older)
                self._calls[item.message.src] = item
        while self._node.has_ready():
            ready = self._node.ready()
            if ready.must_sync:
                loop = asyncio.get_running_loop()
                started = loop.time()
                await loop.run_in_executor(self._writer, self._storage.write, ready)
                took_s = loop.time() - started
                if took_s >= SLOW_WRITE_S:
                    # Nothing else of the quorum moves on this node meanwhile: a slow write
                    # can cost a leader its followers' patience.
                    log.warning(
                        "raft log write slow node_id=%d ms=%d entries=%d",
                        self.config.node_id,
                        round(took_s * 1000),
                        len(ready.entries),
                    )
            for message in ready.messages:
                call = self._calls.get(message.dst)
                if call is not None and call.reply is not None and not call.reply.done():
                    call.answers.append(message)
                else:
                    self._send(message)
            self._apply(ready)
            self._node.advance(ready)
            self._after_ready(ready)
        for src, call in list(self._calls.items()):
            # A fetch the core holds (nothing answered, nothing refused) waits for a later
            # cycle; every other call is answered now, with what the core produced for it.
            held = isinstance(call.message, FetchRequest) and not call.answers
            if not held or call.rejected or call.reply is None or call.reply.done():
                del self._calls[src]
                self._finish_call(call)
        if not self._stopped:
            self._arm_tick_timer()

    def _finish_call(self, call: _Inbound) -> None:
        """Answer a waiting Step call; if its caller gave up, send its answers anew."""
        if call.reply is not None and not call.reply.done():
            call.reply.set_result(call.answers)
            return
        for message in call.answers:
            self._send(message)

    def _apply(self, ready: Ready) -> None:
        if ready.apply_snapshot and ready.snapshot is not None:
            self._state_machine.restore(ready.snapshot)
        if ready.committed_entries:
            self._state_machine.apply(ready.committed_entries)
            for entry in ready.committed_entries:
                proposal = self._proposals.pop(entry.offset, None)
                if proposal is None or proposal.future.done():
                    continue
                if entry.epoch == proposal.epoch and entry.kind is EntryKind.DATA:
                    proposal.future.set_result(entry.offset)
                else:
                    proposal.future.set_exception(
                        NotControllerError(f"entry {entry.offset} was replaced by a new leader")
                    )

    def _after_ready(self, ready: Ready) -> None:
        if ready.role is not self._role:
            log.info(
                "raft role changed node_id=%d role=%s epoch=%d leader_id=%s",
                self.config.node_id,
                ready.role.name,
                ready.epoch,
                ready.leader_id,
            )
            if self._role is Role.LEADER:
                self._fail_proposals("leadership lost")
            self._role = ready.role
        due = self._state_machine.snapshot_image()
        if due is not None and due[0] <= self._node.applied_offset:
            self._node.create_snapshot(*due)
        if self._on_ready is not None:
            self._on_ready(ready)

    def _fail_proposals(self, why: str) -> None:
        proposals, self._proposals = self._proposals, {}
        for proposal in proposals.values():
            if not proposal.future.done():
                proposal.future.set_exception(NotControllerError(why))

    def _send(self, message: RaftMessage) -> None:
        if message.dst in self._transport.blocked:
            return
        channel = self._transport.channel(message.dst)
        if channel is None:
            return  # an observer without an address: it fetches, so it gets replies
        task = asyncio.create_task(self._deliver(channel, message))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _deliver(self, channel: PeerChannel, message: RaftMessage) -> None:
        try:
            reply = await channel.call("Step", to_envelope(message), STEP_TIMEOUT_S + 1)
        except LograftError as exc:
            log.debug(
                "raft send failed node_id=%d dst=%d error=%s",
                self.config.node_id,
                message.dst,
                exc.message,
            )
            return
        if reply.rejected:
            log.warning(
                "raft message rejected by peer node_id=%d dst=%d reason=%s",
                self.config.node_id,
                message.dst,
                reply.rejected,
            )
        if message.dst in self._transport.blocked:
            return
        for envelope in reply.messages:
            try:
                answer = from_envelope(envelope)
            except MalformedRaftMessageError as exc:
                log.warning("malformed raft reply src=%d reason=%s", message.dst, exc)
                continue
            self._inbound.append(_Inbound(answer, None))
        if reply.messages:
            self._wakeup.set()
