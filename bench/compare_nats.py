"""lograft against NATS JetStream (issue 15): the same workloads, alternating, in one run.

Starts a three-node lograft cluster (``lograft cluster up``, combined roles; topics with RF 3,
``min.insync.replicas=2``, producers with ``acks=all``) and a three-node NATS JetStream cluster
(Debian's ``nats-server``: three processes, routes and clients on 127.0.0.1 only, file storage,
streams with three replicas). When ``nats-server`` accepts ``jetstream { sync_interval:
always }`` (releases later than Debian 12's 2.9.10 do), a second NATS cluster runs with it too,
so that NATS is measured both with and without an fsync per write; otherwise the report says
why it did not run.

Each workload runs ``--runs`` times; in every run each system does it once, in its own client
process (Python: our client for lograft, nats-py for NATS), the systems' order swapped on every
other run. The report gives every run and the median, and the ratio lograft / NATS per workload:

* ``publish_async_100B`` / ``publish_async_1KiB``: acknowledged publishes, one call per
  message: lograft ``Producer.send`` with a callback (in flight bounded by
  ``buffer.memory``), NATS ``js.publish_async`` with a done callback (in flight bounded by
  ``publish_async_max_pending``, ``--nats-window``); messages/s from the first call until every
  acknowledgement arrived.
* ``publish_sync_p50_ms`` / ``publish_sync_p99_ms``: one message at a time, waiting for its
  acknowledgement: lograft ``send().result()`` with ``linger.ms=0``, NATS ``await js.publish``.
* ``consume`` (lograft) against ``consume_pull`` and ``consume_push`` (NATS): messages/s reading
  ``--consume-messages`` stored 100-byte messages from the start: ``lograft perf consume``
  (assigned partitions, no group); an ephemeral NATS pull consumer fetching ``--fetch-batch`` at
  a time (ack policy none), and an ordered push consumer.
* ``e2e_1000_p50_ms`` / ``e2e_1000_p99_ms``: 100-byte messages sent at 1000/s (acknowledged
  publishes), latency from before the send to the message reaching a consumer: ``lograft perf
  e2e --throughput 1000``; for NATS a paced ``publish_async`` task and an ordered push consumer
  in one event loop.
* ``server_cpu_s_per_100k_*``: CPU seconds (utime + stime from ``/proc/PID/stat``) of the three
  server processes across each async publish client process (connecting and its 2000-message
  warm-up included, and counted), per 100k messages; ``client_cpu_s_per_100k_*`` the same for
  the client process (from ``getrusage``). ``server_rss_mib``: VmRSS of the three servers
  summed after each run's publishes; ``server_peak_rss_mib``: their VmHWM summed at the end.

A NATS stream is one ordered log, so lograft's topics have one partition (``--partitions``).
Prints one JSON document and writes it to bench/results/compare_nats.json.

Usage: python bench/compare_nats.py [--runs 3] [--messages 100000] [--consume-messages 100000]
"""

# Over 600 lines: one standalone script that also re-runs itself as each client process.
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from _common import (
    LOGRAFT,
    ROOT,
    cpu_seconds,
    create_topic,
    local_cluster,
    run_json,
    write_report,
)

from cluster.launcher.processes import free_base_port

WARMUP = 2000
SYNC_WARMUP = 20
CLIENT_TIMEOUT_S = 900.0
DEADLINE_S = 120.0  # a client gives up when its acknowledgements or messages stop for this long

LOGRAFT_DURABILITY = (
    "flush.policy=fsync (the default): the partition leader fdatasyncs a batch before it "
    "acknowledges it and followers fdatasync before they fetch again, so the high watermark "
    "never passes what is on disk; acks=all, RF 3, min.insync.replicas=2"
)
NATS_DEFAULT_DURABILITY = (
    "file storage, R3, default sync: a publish is acknowledged once a quorum of the stream's "
    "replicas stored it, but the filestore fsyncs on a timer, not per message (sync_interval, "
    "2 minutes by default in the current docs; nats-server 2.9 has no setting for it), so a "
    "power loss of the replicas at once can lose acknowledged messages"
)
NATS_SYNC_DURABILITY = (
    "file storage, R3, jetstream { sync_interval: always }: an fsync on every write before "
    "the replica acknowledges it"
)

# name, message size, subject/stream; the NATS stream names are the subjects upper-cased.
PUBLISH_SIZES = (("100B", 100), ("1KiB", 1024))


# ----------------------------------------------------------------------------------------------
# Client side: each function runs in its own process (``compare_nats.py client ...``) and
# returns one JSON object.


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 3)


def lograft_publish_async(p: dict[str, Any]) -> dict[str, Any]:
    """``Producer.send`` per message with a callback, ``acks=all``; until all are acked."""
    from cluster.client import Producer, RecordFuture

    topic, count, payload = p["topic"], p["count"], b"x" * p["size"]
    failures: list[BaseException] = []

    def on_done(future: RecordFuture) -> None:
        error = future.exception()
        if error is not None:
            failures.append(error)

    with Producer(bootstrap_servers=p["bootstrap"], acks="all") as producer:
        producer.partitions_for(topic)
        for _ in range(p["warmup"]):
            producer.send(topic, payload)
        producer.flush()
        send = producer.send
        start = time.perf_counter()
        for _ in range(count):
            send(topic, payload, callback=on_done)
        sent = time.perf_counter()
        producer.flush()
        done = time.perf_counter()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, the first: {failures[0]!r}")
    return {
        "messages_per_s": round(count / (done - start)),
        "send_calls_s": round(sent - start, 3),
        "elapsed_s": round(done - start, 3),
    }


def lograft_publish_sync(p: dict[str, Any]) -> dict[str, Any]:
    """``send().result()`` one message at a time, ``linger.ms=0``, ``acks=all``."""
    from cluster.client import Producer

    topic, payload = p["topic"], b"x" * 100
    latencies: list[float] = []
    with Producer(bootstrap_servers=p["bootstrap"], acks="all", linger_ms=0) as producer:
        for _ in range(SYNC_WARMUP):
            producer.send(topic, payload).result(timeout=DEADLINE_S)
        for _ in range(p["count"]):
            start = time.perf_counter()
            producer.send(topic, payload).result(timeout=DEADLINE_S)
            latencies.append((time.perf_counter() - start) * 1000.0)
    return {"p50_ms": _percentile(latencies, 0.5), "p99_ms": _percentile(latencies, 0.99)}


async def _nats_connect(urls: list[str]) -> Any:
    import nats

    return await nats.connect(servers=urls, connect_timeout=5, max_reconnect_attempts=3)


async def _nats_publish_async(p: dict[str, Any]) -> dict[str, Any]:
    import asyncio as aio

    nc = await _nats_connect(p["urls"])
    try:
        js = nc.jetstream(publish_async_max_pending=p["window"])
        subject, count, payload = p["subject"], p["count"], b"x" * p["size"]
        failures: list[BaseException] = []

        def on_done(future: aio.Future[Any]) -> None:
            error = future.exception() if not future.cancelled() else aio.CancelledError()
            if error is not None:
                failures.append(error)

        async with aio.timeout(DEADLINE_S):
            for _ in range(p["warmup"]):
                (await js.publish_async(subject, payload)).add_done_callback(on_done)
            await js.publish_async_completed()
        publish = js.publish_async
        start = time.perf_counter()
        for _ in range(count):
            (await publish(subject, payload)).add_done_callback(on_done)
        sent = time.perf_counter()
        async with aio.timeout(DEADLINE_S):
            await js.publish_async_completed()
        done = time.perf_counter()
    finally:
        await nc.close()
    if failures:
        raise RuntimeError(f"{len(failures)} publishes failed, the first: {failures[0]!r}")
    return {
        "messages_per_s": round(count / (done - start)),
        "send_calls_s": round(sent - start, 3),
        "elapsed_s": round(done - start, 3),
    }


async def _nats_publish_sync(p: dict[str, Any]) -> dict[str, Any]:
    nc = await _nats_connect(p["urls"])
    latencies: list[float] = []
    try:
        js = nc.jetstream()
        subject, payload = p["subject"], b"x" * 100
        for _ in range(SYNC_WARMUP):
            await js.publish(subject, payload, timeout=DEADLINE_S)
        for _ in range(p["count"]):
            start = time.perf_counter()
            await js.publish(subject, payload, timeout=DEADLINE_S)
            latencies.append((time.perf_counter() - start) * 1000.0)
    finally:
        await nc.close()
    return {"p50_ms": _percentile(latencies, 0.5), "p99_ms": _percentile(latencies, 0.99)}


async def _nats_consume_pull(p: dict[str, Any]) -> dict[str, Any]:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    from nats.js.errors import FetchTimeoutError

    nc = await _nats_connect(p["urls"])
    count, received, total_bytes = p["count"], 0, 0
    try:
        js = nc.jetstream()
        config = ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL)
        sub = await js.pull_subscribe(p["subject"], stream=p["stream"], config=config)
        start = end = time.perf_counter()
        while received < count:
            try:
                batch = await sub.fetch(min(p["fetch_batch"], count - received), timeout=5)
            except FetchTimeoutError:
                if time.perf_counter() - end > DEADLINE_S:
                    break
                continue
            end = time.perf_counter()
            received += len(batch)
            total_bytes += sum(len(msg.data) for msg in batch)
        await sub.unsubscribe()
    finally:
        await nc.close()
    if received < count:
        raise RuntimeError(f"only {received} of {count} messages arrived")
    return {"messages_per_s": round(received / (end - start)), "elapsed_s": round(end - start, 3)}


async def _nats_consume_push(p: dict[str, Any]) -> dict[str, Any]:
    import asyncio as aio

    from nats.aio.msg import Msg
    from nats.js.api import DeliverPolicy

    nc = await _nats_connect(p["urls"])
    count = p["count"]
    state = {"received": 0, "end": 0.0}
    finished = aio.Event()

    async def on_msg(msg: Msg) -> None:
        state["received"] += 1
        if state["received"] >= count:
            state["end"] = time.perf_counter()
            finished.set()

    try:
        js = nc.jetstream()
        start = time.perf_counter()  # the ordered consumer delivers as soon as it exists
        sub = await js.subscribe(
            p["subject"],
            stream=p["stream"],
            cb=on_msg,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.ALL,
        )
        async with aio.timeout(DEADLINE_S):
            await finished.wait()
        await sub.unsubscribe()
    finally:
        await nc.close()
    elapsed = state["end"] - start
    return {"messages_per_s": round(count / elapsed), "elapsed_s": round(elapsed, 3)}


async def _nats_e2e(p: dict[str, Any]) -> dict[str, Any]:
    """Publish at ``rate``/s from one task; an ordered push consumer stamps each arrival."""
    import asyncio as aio

    from nats.aio.msg import Msg
    from nats.js.api import DeliverPolicy

    nc = await _nats_connect(p["urls"])
    count, interval = p["count"], 1.0 / p["rate"]
    run_id = os.urandom(8)
    sent_at = [0.0] * count
    received_at: list[float | None] = [None] * count
    state = {"received": 0}
    finished = aio.Event()

    async def on_msg(msg: Msg) -> None:
        now = time.perf_counter()
        data = msg.data
        if data[:8] != run_id:
            return
        sequence = int.from_bytes(data[8:16], "big")
        if received_at[sequence] is None:
            received_at[sequence] = now
            state["received"] += 1
            if state["received"] >= count:
                finished.set()

    try:
        js = nc.jetstream()
        sub = await js.subscribe(
            p["subject"],
            stream=p["stream"],
            cb=on_msg,
            ordered_consumer=True,
            deliver_policy=DeliverPolicy.NEW,
        )
        padding = b"x" * (100 - 16)
        acks: list[aio.Future[Any]] = []
        begin = time.perf_counter()
        for sequence in range(count):
            delay = begin + sequence * interval - time.perf_counter()
            if delay > 0:
                await aio.sleep(delay)
            sent_at[sequence] = time.perf_counter()
            payload = run_id + sequence.to_bytes(8, "big") + padding
            acks.append(await js.publish_async(p["subject"], payload))
        elapsed = time.perf_counter() - begin
        async with aio.timeout(DEADLINE_S):
            await aio.gather(*acks)
            await finished.wait()
        await sub.unsubscribe()
    finally:
        await nc.close()
    latencies = [
        (received - sent) * 1000.0
        for sent, received in zip(sent_at, received_at, strict=True)
        if received is not None
    ]
    return {
        "p50_ms": _percentile(latencies, 0.5),
        "p99_ms": _percentile(latencies, 0.99),
        "messages_per_s": round(count / elapsed),
    }


CLIENTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "lograft_publish_async": lograft_publish_async,
    "lograft_publish_sync": lograft_publish_sync,
    "nats_publish_async": lambda p: asyncio.run(_nats_publish_async(p)),
    "nats_publish_sync": lambda p: asyncio.run(_nats_publish_sync(p)),
    "nats_consume_pull": lambda p: asyncio.run(_nats_consume_pull(p)),
    "nats_consume_push": lambda p: asyncio.run(_nats_consume_push(p)),
    "nats_e2e": lambda p: asyncio.run(_nats_e2e(p)),
}


# ----------------------------------------------------------------------------------------------
# Servers: process CPU and memory.


def _cpu_s(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def _status_mib(pids: list[int], key: str) -> float:
    total_kib = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                total_kib += int(line.split()[1])
    return round(total_kib / 1024, 1)


@dataclass
class System:
    """One cluster under test: how its clients reach it and its three server pids."""

    name: str
    kind: str  # "lograft" or "nats"
    durability: str
    pids: list[int]
    bootstrap: str = ""
    urls: list[str] = field(default_factory=list)


def _run_client(workload: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Run one client in its own process; its result and the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "client",
        workload,
        json.dumps(params),
    ]
    result = _run_json(command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, cpu


def _run_json(command: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, timeout=CLIENT_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{command[2:4]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# ----------------------------------------------------------------------------------------------
# NATS servers.


def _nats_version() -> str:
    done = subprocess.run(["nats-server", "--version"], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def _nats_config(node: int, ports: list[int], store: Path, sync_always: bool) -> str:
    client, routes = ports[node], ports[3:]
    sync = "\n  sync_interval: always" if sync_always else ""
    return (
        f"server_name: n{node}\n"
        f"listen: 127.0.0.1:{client}\n"
        f'jetstream {{\n  store_dir: "{store}"{sync}\n}}\n'
        "cluster {\n"
        "  name: bench\n"
        f"  listen: 127.0.0.1:{routes[node]}\n"
        "  routes: [" + ", ".join(f"nats-route://127.0.0.1:{port}" for port in routes) + "]\n"
        "}\n"
    )


def nats_sync_always_supported(workdir: Path) -> tuple[bool, str]:
    """Whether this ``nats-server`` accepts ``sync_interval: always`` (its ``-t`` check)."""
    config = workdir / "probe.conf"
    config.write_text(_nats_config(0, [4222, 0, 0, 6222, 6223, 6224], workdir / "probe", True))
    done = subprocess.run(
        ["nats-server", "-t", "-c", str(config)], capture_output=True, text=True, check=False
    )
    message = (done.stderr or done.stdout).strip().replace(str(config), "probe.conf")
    return done.returncode == 0, message


@contextlib.contextmanager
def nats_cluster(workdir: Path, sync_always: bool) -> Iterator[tuple[list[str], list[int]]]:
    """Three ``nats-server`` processes with JetStream; yields client urls and pids, stops them
    (SIGTERM, then SIGKILL after 10 s) however the block ends."""
    workdir.mkdir(parents=True)
    base = free_base_port(6)
    ports = list(range(base, base + 6))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for node in range(3):
            config = workdir / f"n{node}.conf"
            config.write_text(_nats_config(node, ports, workdir / f"store{node}", sync_always))
            with open(workdir / f"n{node}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        ["nats-server", "-c", str(config)],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                )
        urls = [f"nats://127.0.0.1:{port}" for port in ports[:3]]
        yield urls, [process.pid for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _nats_create_streams(urls: list[str], streams: list[str]) -> None:
    """Create R3 file streams (one subject each, named as the stream lower-cased), retrying
    while JetStream's meta group elects a leader."""
    from nats.js.api import StorageType
    from nats.js.errors import Error as JsError

    nc = await _nats_connect(urls)
    try:
        js = nc.jetstream(timeout=10)
        for stream in streams:
            deadline = time.monotonic() + 60
            while True:
                try:
                    await js.add_stream(
                        name=stream,
                        subjects=[stream.lower()],
                        num_replicas=3,
                        storage=StorageType.FILE,
                    )
                    break
                except (JsError, TimeoutError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.5)
    finally:
        await nc.close()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited child stays a zombie until it is waited for)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for_ports(urls: list[str], pids: list[int]) -> None:
    """Wait up to 30 s until every server accepts connections; raise if one exited."""
    deadline = time.monotonic() + 30
    for url in urls:
        host, port = url.removeprefix("nats://").split(":")
        while True:
            for pid in pids:
                if not _alive(pid):
                    raise RuntimeError(f"nats-server {pid} exited")
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # polling a starting server


# ----------------------------------------------------------------------------------------------
# The runs.

STREAMS = ["PUB100B", "PUB1KIB", "SYNC", "CONSUME", "E2E"]


def _publish_params(
    system: System, size_name: str, size: int, count: int, window: int
) -> dict[str, Any]:
    name = f"PUB{size_name.upper()}"
    params: dict[str, Any] = {"count": count, "size": size, "warmup": WARMUP}
    if system.kind == "lograft":
        return {**params, "bootstrap": system.bootstrap, "topic": name.lower()}
    return {**params, "urls": system.urls, "subject": name.lower(), "window": window}


def _one_run(
    systems: list[System], args: argparse.Namespace, runs: dict[str, dict[str, list[Any]]]
) -> None:
    """Every workload once per system, in the order of ``systems``."""

    def record(workload: str, system: System, value: Any) -> None:
        runs.setdefault(workload, {}).setdefault(system.name, []).append(value)

    for size_name, size in PUBLISH_SIZES:
        for system in systems:
            params = _publish_params(system, size_name, size, args.messages, args.nats_window)
            cpu_before = _cpu_s(system.pids)
            result, client_cpu = _run_client(f"{system.kind}_publish_async", params)
            server_cpu = _cpu_s(system.pids) - cpu_before
            per_100k = 100_000 / (args.messages + WARMUP)
            result["server_cpu_s"] = round(server_cpu, 3)
            result["client_cpu_s"] = round(client_cpu, 3)
            record(f"publish_async_{size_name}", system, result)
            record(f"server_cpu_s_per_100k_{size_name}", system, round(server_cpu * per_100k, 3))
            record(f"client_cpu_s_per_100k_{size_name}", system, round(client_cpu * per_100k, 3))
    for system in systems:
        record("server_rss_mib", system, _status_mib(system.pids, "VmRSS"))
    for system in systems:
        if system.kind == "lograft":
            params = {"bootstrap": system.bootstrap, "topic": "sync", "count": args.sync_messages}
        else:
            params = {"urls": system.urls, "subject": "sync", "count": args.sync_messages}
        result, _ = _run_client(f"{system.kind}_publish_sync", params)
        record("publish_sync_p50_ms", system, result["p50_ms"])
        record("publish_sync_p99_ms", system, result["p99_ms"])
    for system in systems:
        if system.kind == "lograft":
            command = [*LOGRAFT, "--bootstrap", system.bootstrap, "perf", "consume"]
            command += ["--topic", "consume", "--messages", str(args.consume_messages), "--json"]
            result = run_json(command)
            record("consume", system, {"messages_per_s": round(result["records_per_sec"])})
            continue
        params = {"urls": system.urls, "subject": "consume", "stream": "CONSUME"}
        params |= {"count": args.consume_messages, "fetch_batch": args.fetch_batch}
        pull, _ = _run_client("nats_consume_pull", params)
        push, _ = _run_client("nats_consume_push", params)
        record("consume_pull", system, pull)
        record("consume_push", system, push)
    for system in systems:
        if system.kind == "lograft":
            command = [*LOGRAFT, "--bootstrap", system.bootstrap, "perf", "e2e", "--topic", "e2e"]
            command += ["--num-records", str(args.e2e_messages), "--throughput", str(args.rate)]
            command += ["--acks", "all", "--record-size", "100", "--json"]
            result = run_json(command)
            result = {"p50_ms": result["latency_ms_p50"], "p99_ms": result["latency_ms_p99"]}
        else:
            params = {"urls": system.urls, "subject": "e2e", "stream": "E2E"}
            params |= {"count": args.e2e_messages, "rate": args.rate}
            result, _ = _run_client("nats_e2e", params)
        record("e2e_1000_p50_ms", system, result["p50_ms"])
        record("e2e_1000_p99_ms", system, result["p99_ms"])


def _prefill(systems: list[System], count: int) -> None:
    """Store ``count`` 100-byte messages in each system's ``consume`` topic or stream."""
    for system in systems:
        params: dict[str, Any]
        if system.kind == "lograft":
            params = {"bootstrap": system.bootstrap, "topic": "consume"}
        else:
            params = {"urls": system.urls, "subject": "consume", "window": 4000}
        params |= {"count": count, "size": 100, "warmup": 0}
        _run_client(f"{system.kind}_publish_async", params)


# How each workload's runs become one number, and whether more is better.
WORKLOADS: dict[str, tuple[str, str | None, bool]] = {
    "publish_async_100B": ("messages/s", "messages_per_s", True),
    "publish_async_1KiB": ("messages/s", "messages_per_s", True),
    "publish_sync_p50_ms": ("ms", None, False),
    "publish_sync_p99_ms": ("ms", None, False),
    "consume": ("messages/s", "messages_per_s", True),
    "e2e_1000_p50_ms": ("ms", None, False),
    "e2e_1000_p99_ms": ("ms", None, False),
    "server_cpu_s_per_100k_100B": ("CPU s (3 servers)", None, False),
    "server_cpu_s_per_100k_1KiB": ("CPU s (3 servers)", None, False),
    "client_cpu_s_per_100k_100B": ("CPU s (client)", None, False),
    "client_cpu_s_per_100k_1KiB": ("CPU s (client)", None, False),
    "server_rss_mib": ("MiB (3 servers)", None, False),
}


def _median(values: list[Any], key: str | None) -> float:
    numbers = [float(v[key]) if key is not None else float(v) for v in values]
    return round(float(statistics.median(numbers)), 3)


def _summarise(
    systems: list[System], runs: dict[str, dict[str, list[Any]]]
) -> dict[str, dict[str, Any]]:
    lograft = systems[0].name
    nats_systems = [s.name for s in systems if s.kind == "nats"]
    summary: dict[str, dict[str, Any]] = {}
    for workload, (unit, key, higher_better) in WORKLOADS.items():
        entry: dict[str, Any] = {"unit": unit, "higher_is_better": higher_better}
        ours = _median(runs[workload][lograft], key)
        entry[lograft] = ours
        for name in nats_systems:
            # lograft's consume against each NATS consumer kind
            variants = ["consume_pull", "consume_push"] if workload == "consume" else [workload]
            for variant in variants:
                label = name if variant == workload else f"{name}_{variant.split('_')[1]}"
                theirs = _median(runs[variant][name], key)
                entry[label] = theirs
                entry[f"ratio_{lograft}_over_{label}"] = round(ours / theirs, 3) if theirs else None
        summary[workload] = entry
    return summary


def _hardware() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib // 1024 // 1024} GiB RAM"
    return f"{os.cpu_count()} cores ({model}){memory}, {platform.platform()}"


# Over 70 lines: both clusters up, runs alternated, then one report, in order.
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=100_000, help="per async publish run")
    parser.add_argument("--sync-messages", type=int, default=500)
    parser.add_argument("--consume-messages", type=int, default=100_000)
    parser.add_argument("--e2e-messages", type=int, default=5_000)
    parser.add_argument("--rate", type=int, default=1000, help="e2e messages/s")
    parser.add_argument("--partitions", type=int, default=1, help="lograft topics' partitions")
    parser.add_argument("--nats-window", type=int, default=4000, help="publish_async in flight")
    parser.add_argument("--fetch-batch", type=int, default=1000, help="NATS pull batch")
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/compare_nats.json")
    args = parser.parse_args()
    if shutil.which("nats-server") is None:
        sys.exit("nats-server is missing: make bench-compare installs it (bench/install-tool.sh)")

    with (
        tempfile.TemporaryDirectory(prefix="compare-nats-") as temp,
        contextlib.ExitStack() as stack,
    ):
        workdir = Path(temp)
        sync_ok, sync_message = nats_sync_always_supported(workdir)
        bootstrap = stack.enter_context(local_cluster(str(workdir / "lograft")))
        cluster = json.loads((workdir / "lograft" / "cluster.json").read_text())
        systems = [
            System(
                "lograft",
                "lograft",
                LOGRAFT_DURABILITY,
                [node["pid"] for node in cluster["nodes"]],
                bootstrap=bootstrap,
            )
        ]
        urls, pids = stack.enter_context(nats_cluster(workdir / "nats", sync_always=False))
        systems.append(System("nats", "nats", NATS_DEFAULT_DURABILITY, pids, urls=urls))
        if sync_ok:
            urls, pids = stack.enter_context(nats_cluster(workdir / "nats-sync", sync_always=True))
            systems.append(System("nats_sync", "nats", NATS_SYNC_DURABILITY, pids, urls=urls))

        for topic in ("pub100b", "pub1kib", "sync", "consume"):
            create_topic(bootstrap, topic, args.partitions)
        create_topic(bootstrap, "e2e", 1)
        for system in systems[1:]:
            _wait_for_ports(system.urls, system.pids)
            asyncio.run(_nats_create_streams(system.urls, STREAMS))
        _prefill(systems, args.consume_messages)

        runs: dict[str, dict[str, list[Any]]] = {}
        for index in range(args.runs):
            order = systems if index % 2 == 0 else [*systems[1:], systems[0]]
            _one_run(order, args, runs)
        peak = {system.name: _status_mib(system.pids, "VmHWM") for system in systems}

    durability = {system.name: system.durability for system in systems}
    if not sync_ok:
        durability["nats_sync"] = (
            "not run: this nats-server rejects jetstream { sync_interval: always } "
            f"({sync_message}); later releases accept it"
        )
    report: dict[str, Any] = {
        "hardware": _hardware(),
        "versions": {
            "nats-server": _nats_version(),
            "nats-py": metadata.version("nats-py"),
            "python": platform.python_version(),
        },
        "runs": args.runs,
        "order": (
            "per workload, each system once per run, each in a fresh client process; "
            "lograft first in runs 1, 3, ... and last in runs 2, 4, ..."
        ),
        "setup": (
            f"three lograft nodes (combined roles) and {3 * (len(systems) - 1)} nats-server "
            "processes (three per NATS cluster), all on 127.0.0.1 and all running throughout; "
            f"lograft topics with {args.partitions} partition(s), RF 3, "
            "min.insync.replicas=2, acks=all; NATS streams R3, file storage"
        ),
        "sizes": {
            "messages": args.messages,
            "sync_messages": args.sync_messages,
            "consume_messages": args.consume_messages,
            "e2e_messages": args.e2e_messages,
            "e2e_rate": args.rate,
            "nats_window": args.nats_window,
            "fetch_batch": args.fetch_batch,
            "warmup": WARMUP,
        },
        "durability": durability,
        "ratio_note": (
            "ratio = lograft / NATS (median over runs): above 1 means lograft is faster where "
            "higher_is_better, and slower or costlier where not"
        ),
        "ratios": {},
        "workloads": _summarise(systems, runs),
        "server_peak_rss_mib": peak,
        "runs_detail": runs,
    }
    report["ratios"] = {
        workload: {k: v for k, v in entry.items() if k.startswith("ratio_")}
        for workload, entry in report["workloads"].items()
    }
    write_report(report, args.output)


def client_main(workload: str, params: str) -> None:
    """``compare_nats.py client WORKLOAD PARAMS_JSON``: one client run, its JSON on stdout."""
    print(json.dumps(CLIENTS[workload](json.loads(params))))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "client":
        client_main(sys.argv[2], sys.argv[3])
    else:
        main()
