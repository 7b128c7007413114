"""Framed RPC: the hot broker calls (Produce, Fetch) as length-prefixed protobuf over TCP.

gRPC's asyncio server costs about 430 µs of CPU per unary call on this project's 2-core
machine, against about 60 µs for a frame read and written by an asyncio protocol
(``bench/rpc_transport.py``). An ``acks=all`` record costs its leader a Produce and a fetch
from each follower, so the transport, not the broker's own work, set its latency and
throughput. The node therefore listens with :mod:`lograft.protocol.framed.server` on each
listener's port: a connection that opens with
:data:`~lograft.protocol.framed.protocol.MAGIC` speaks frames, and any other (gRPC's HTTP/2
preface) is relayed to the node's gRPC server, which listens on loopback only. One port per
listener serves both, so configurations, Docker port maps and network faults see no
difference.
"""
