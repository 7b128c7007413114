"""The consumer's decoding: ``decode_columns`` and the fetcher handing out records and
batches (``Consumer.poll`` and ``Consumer.poll_batches`` without a network).

``decode_columns`` must give exactly the records, and raise exactly where,
``decode_records`` does; its fast path (records of one shape) must not change either.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.client._clock import SYSTEM_CLOCK
from cluster.client._connection import TopicPartition
from cluster.client._fetch import Fetcher
from cluster.client._subscription import CompletedFetch, PartitionState, SubscriptionState
from cluster.client.consumer import ConsumerBatch, ConsumerRecord
from lograft.protocol.batch_header import HEADER_SIZE, iter_headers, parse_header
from lograft.protocol.compression import CompressionType
from lograft.protocol.control_records import AbortedBatchFilter, EndTxnMarker, encode_marker_batch
from lograft.protocol.errors import CorruptMessageError
from lograft.protocol.record_codec import (
    BatchSkip,
    _batch_records_data,
    _decode_uniform,
    decode_columns,
)
from lograft.protocol.records import (
    LOG_APPEND_TIME,
    RecordBatchBuilder,
    decode_records,
    encode_batch,
    iter_records,
)

TP = TopicPartition("t", 0)


def rows(batch: bytes) -> list[tuple[object, ...]]:
    """``decode_columns`` row by row, checked against ``decode_records``."""
    header = parse_header(batch)
    columns = list(zip(*decode_columns(batch, header), strict=True))
    expected = [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(batch, header)
    ]
    assert columns == expected
    return columns


def at(batch: bytes, base_offset: int) -> bytes:
    """The batch as stored at ``base_offset`` (outside the CRC, as the broker sets it)."""
    return struct.pack(">q", base_offset) + batch[8:]


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return bytes(batch)


# ---- decode_columns ----------------------------------------------------------------------

record = st.tuples(
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=300),
    st.integers(-10_000, 10_000),
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=2),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(record, min_size=1, max_size=80),
    st.sampled_from(list(CompressionType)),
    st.booleans(),
)
def test_columns_equal_decode_records(
    records: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]],
    codec: CompressionType,
    uniform: bool,
) -> None:
    builder = RecordBatchBuilder(codec)
    for key, value, delta, headers in records:
        if uniform:  # one shape: the fast path's
            key, value, headers = (key or b"")[:1].ljust(1), b"v" * 9, []
        builder.append(value, key, 1_700_000_000_000 + delta, headers)
    rows(builder.build())


@pytest.mark.parametrize("codec", list(CompressionType))
@pytest.mark.parametrize("count", [1, 63, 64, 65, 300, 9000])
def test_uniform_batches_around_varint_boundaries(codec: CompressionType, count: int) -> None:
    values = [b"%07d" % i for i in range(count)]
    decoded = rows(at(encode_batch(values, compression=codec, timestamp_ms=5), 1000))
    assert [r[0] for r in decoded] == list(range(1000, 1000 + count))
    assert [r[3] for r in decoded] == values
    assert {r[1] for r in decoded} == {5}


def test_keys_timestamps_and_log_append_time() -> None:
    builder = RecordBatchBuilder()
    # Deltas of one, two and three bytes, and negative ones.
    for i, delta in enumerate([0, 1, -1, 63, -64, 64, 8191, 8192, 1 << 20, -(1 << 20)]):
        builder.append(b"value", b"key%d" % i, 1_000_000_000 + delta)
    decoded = rows(builder.build())
    assert [r[1] - 1_000_000_000 for r in decoded][-3:] == [8192, 1 << 20, -(1 << 20)]
    appended = RecordBatchBuilder(timestamp_type=LOG_APPEND_TIME)
    for ts in (10, 20):
        appended.append(b"v", None, ts)
    batch = bytearray(appended.build())
    struct.pack_into(">q", batch, 35, 99)  # the broker's append time
    assert [r[1] for r in rows(with_crc(batch))] == [99, 99]


def test_null_values_empty_values_and_headers() -> None:
    builder = RecordBatchBuilder()
    builder.append(None, b"k")
    builder.append(b"", None)
    builder.append(b"x", b"", headers=[("h", None), ("é", b"1")])
    assert [(r[2], r[3], r[4]) for r in rows(builder.build())] == [
        (b"k", None, ()),
        (None, b"", ()),
        (b"", b"x", (("h", None), ("é", b"1"))),
    ]


def test_a_compacted_batch_keeps_its_offsets() -> None:
    # Records at deltas 0 and 2 only (the cleaner dropped 1): not the fast path's 0, 1, 2.
    full = encode_batch([b"aa", b"bb", b"cc"])
    header = parse_header(full)
    records = decode_records(full, header)
    assert [r.offset for r in records] == [0, 1, 2]
    data = full[HEADER_SIZE:]
    first_end = 1 + data[0] // 2
    second_end = first_end + 1 + data[first_end] // 2
    compacted = bytearray(full[:HEADER_SIZE] + data[:first_end] + data[second_end:])
    struct.pack_into(">i", compacted, 8, len(compacted) - 12)
    struct.pack_into(">i", compacted, 57, 2)
    assert [(r[0], r[3]) for r in rows(with_crc(compacted))] == [(0, b"aa"), (2, b"cc")]


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d[:1] + bytes([d[1] + 2]) + d[2:],  # a record length one byte too long
        lambda d: d[:-1],  # the last record cut short
        lambda d: d + b"\x00",  # a byte after the last record
        lambda d: d[:4] + b"\x07" + d[5:],  # an offset delta out of the batch
    ],
)
def test_a_malformed_uniform_batch_raises_as_decode_records(
    edit: Callable[[bytes], bytes],
) -> None:
    good = encode_batch([b"x" * 100] * 3)
    bad = bytearray(good[:HEADER_SIZE] + edit(good[HEADER_SIZE:]))
    struct.pack_into(">i", bad, 8, len(bad) - 12)
    batch = with_crc(bad)
    header = parse_header(batch)
    with pytest.raises(CorruptMessageError):
        decode_records(batch, header)
    with pytest.raises(CorruptMessageError):
        decode_columns(batch, header)


# ---- the fetcher: poll and poll_batches --------------------------------------------------


def fetcher() -> tuple[Fetcher, PartitionState]:
    subscriptions = SubscriptionState("earliest", committed_first=False, discard=lambda _: None)
    fetch = Fetcher(
        None,  # type: ignore[arg-type]  # handing out records never touches connections
        subscriptions,
        respond=lambda _: None,
        want_metadata=lambda: None,
        record_type=ConsumerRecord,
        batch_type=ConsumerBatch,
        fetch_min_bytes=1,
        fetch_max_wait_ms=500,
        fetch_max_bytes=1 << 20,
        partition_max_bytes=1 << 20,
        request_timeout_ms=30000,
        backoff_s=0.1,
        clock=SYSTEM_CLOCK,
    )
    state = subscriptions.states[TP] = subscriptions.new_state()
    return fetch, state


def log_of(*batches: tuple[bytes, int]) -> bytes:
    return b"".join(at(batch, offset) for batch, offset in batches)


def buffer(
    state: PartitionState, data: bytes, fetch_offset: int, skip: BatchSkip | None = None
) -> None:
    """``data`` fetched from ``fetch_offset``, the partition's position."""
    next_offset = max(h.next_offset for h in iter_headers(data))
    state.position = fetch_offset
    state.buffered.append(CompletedFetch(data, fetch_offset, next_offset, skip))


def test_poll_starts_mid_batch_skips_control_batches_and_moves_the_position() -> None:
    marker = encode_marker_batch(EndTxnMarker(True, 0), 3, 0, 7)
    data = log_of(
        (encode_batch([b"a", b"b", b"c"], timestamp_ms=7), 10),
        (marker, 13),
        (encode_batch([b"d", b"e"], [b"k1", b"k2"], timestamp_ms=8), 14),
    )
    fetch, state = fetcher()
    buffer(state, data, 11)
    first = fetch.drain(2)
    assert first == [
        ConsumerRecord("t", 0, 11, 7, None, b"b"),
        ConsumerRecord("t", 0, 12, 7, None, b"c"),
    ]
    assert state.position == 13
    assert fetch.drain(10) == [
        ConsumerRecord("t", 0, 14, 8, b"k1", b"d"),
        ConsumerRecord("t", 0, 15, 8, b"k2", b"e"),
    ]
    assert state.position == 16 and not state.buffered
    assert [r.value for r in iter_records(data, 11)] == [b"b", b"c", b"d", b"e"]


def test_read_committed_drops_aborted_batches_from_records_and_batches() -> None:
    def txn(values: list[bytes]) -> bytes:
        builder = RecordBatchBuilder(
            producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
        )
        for value in values:
            builder.append(value, timestamp_ms=1)
        return builder.build()

    abort = encode_marker_batch(EndTxnMarker(False, 0), 7, 0, 1)
    data = log_of((txn([b"x", b"y"]), 0), (abort, 2), (encode_batch([b"ok"]), 3))
    for raw in (False, True):
        fetch, state = fetcher()
        buffer(state, data, 0, skip=AbortedBatchFilter([(7, 0)]))
        if raw:
            batches = fetch.drain_batches(100)
            assert [(b.base_offset, b.next_offset) for b in batches] == [(3, 4)]
            assert [r.value for b in batches for r in b.records()] == [b"ok"]
        else:
            assert [r.value for r in fetch.drain(100)] == [b"ok"]
        assert state.position == 4


def test_poll_batches_after_poll_hands_out_the_rest_of_a_batch_whole() -> None:
    first = encode_batch([b"%d" % i for i in range(5)], compression=CompressionType.LZ4)
    data = log_of((first, 0), (encode_batch([b"5", b"6"]), 5))
    fetch, state = fetcher()
    buffer(state, data, 0)
    assert [r.offset for r in fetch.drain(2)] == [0, 1]
    batches = fetch.drain_batches(100)
    assert [(b.base_offset, b.next_offset, b.start_offset) for b in batches] == [
        (0, 5, 2),
        (5, 7, 5),
    ]
    assert batches[0].data == at(first, 0), "the batch as stored, still compressed"
    assert [r.value for b in batches for r in b.records()] == [b"2", b"3", b"4", b"5", b"6"]
    assert state.position == 7
    assert fetch.drain(10) == [] and not state.buffered


@pytest.mark.parametrize("raw", [False, True])
def test_a_corrupt_batch_raises_after_the_records_before_it(raw: bool) -> None:
    bad = bytearray(at(encode_batch([b"c"]), 2))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    data = log_of((encode_batch([b"a", b"b"]), 0)) + bytes(bad)
    fetch, state = fetcher()
    buffer(state, data, 0)
    drain = fetch.drain_batches if raw else fetch.drain
    # What precedes the bad batch is handed out; what was fetched past it is dropped, to be
    # fetched again from the position.
    assert len(drain(100)) == (1 if raw else 2)
    assert state.position == 2 and state.fetch_offset == 2 and not state.buffered
    # The fetch again from the bad batch raises, and keeps raising until a seek.
    for _ in range(2):
        buffer(state, bytes(bad), 2)
        with pytest.raises(CorruptMessageError):
            drain(100)
        assert state.position == 2 and not state.buffered


def test_consumer_record_compares_as_the_dataclass_did() -> None:
    record = ConsumerRecord("t", 1, 2, 3, None, b"v")
    assert record == ConsumerRecord("t", 1, 2, 3, None, b"v", ())
    assert record != ("t", 1, 2, 3, None, b"v", ()) and record != ("t", 1, 2, 3, None, b"v", ())
    assert hash(record) == hash(ConsumerRecord("t", 1, 2, 3, None, b"v"))
    assert repr(record) == (
        "ConsumerRecord(topic='t', partition=1, offset=2, timestamp=3, key=None, value=b'v', "
        "headers=())"
    )
    with pytest.raises(AttributeError):
        record.value = b"w"  # type: ignore[misc]


@pytest.mark.parametrize("count", [1, 64, 8192, 8193, 16384])
@pytest.mark.parametrize("keyed", [False, True])
def test_producer_batches_take_the_fast_path(count: int, keyed: bool) -> None:
    # A batch that silently misses the fast path decodes right but several times slower
    # (bulk batches of 9000+ records once did, their offset deltas being three bytes).
    keys = [b"key-%08d" % i for i in range(count)] if keyed else None
    batch = encode_batch([b"%0100d" % i for i in range(count)], keys, timestamp_ms=3)
    header = parse_header(batch)
    data = _batch_records_data(batch, header)
    assert _decode_uniform(data, count, 0, 3, None) is not None
    builder = RecordBatchBuilder()
    for i in range(min(count, 300)):
        builder.append(b"v" * 100, keys[i] if keys else None, 1_000 + i)
    built = builder.build()
    header = parse_header(built)
    columns = _decode_uniform(
        _batch_records_data(built, header), header.records_count, 0, 1_000, None
    )
    assert columns is not None
    assert list(columns.timestamps) == [1_000 + i for i in range(header.records_count)]
