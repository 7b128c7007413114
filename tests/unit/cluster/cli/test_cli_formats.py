"""The record formats of ``lograft consume`` (output) and ``lograft produce`` (input)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.cli._formats import (
    InputRecord,
    decode_bytes,
    encode_bytes,
    format_record,
    parse_line,
    record_to_json,
)
from cluster.client import ConsumerRecord
from lograft.protocol.errors import InvalidRequestError


def _record(
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> ConsumerRecord:
    return ConsumerRecord("orders", 2, 41, 1_700_000_000_000, key, value, headers)


def _round_trip_json(record: ConsumerRecord) -> InputRecord:
    line = format_record(record, "json", b"\t")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    return parse_line(line[:-1], "json", 1)


def test_json_line_fields() -> None:
    record = _record(b"user-1", "h\u00e9llo".encode(), (("trace", b"abc"), ("empty", None)))
    doc = json.loads(format_record(record, "json", b"\t"))
    assert doc == {
        "topic": "orders",
        "partition": 2,
        "offset": 41,
        "timestamp": 1_700_000_000_000,
        "key": "user-1",
        "value": "h\u00e9llo",
        "headers": [{"key": "trace", "value": "abc"}, {"key": "empty", "value": None}],
    }


def test_json_binary_bytes_are_base64_with_an_encoding_field() -> None:
    record = _record(b"\xff\x00", b"\x80\x81\x82", (("bin", b"\xfe"),))
    doc = record_to_json(record)
    assert (doc["key"], doc["key_encoding"]) == ("/wA=", "base64")
    assert (doc["value"], doc["value_encoding"]) == ("gIGC", "base64")
    assert doc["headers"] == [{"key": "bin", "value": "/g==", "value_encoding": "base64"}]


@pytest.mark.parametrize(
    ("key", "value", "headers"),
    [
        (None, b"plain", ()),
        (None, None, ()),
        (b"k", b"", (("h", b"v"), ("h", b"again"), ("n", None))),
        (b"\x00\xff", b"\xc3\x28 invalid utf-8", (("b", b"\x80"),)),
        ("\u00fcnic\u00f6de \u2603".encode(), b'{"nested": "json\\n"}', ()),
    ],
)
def test_json_round_trip(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...]
) -> None:
    back = _round_trip_json(_record(key, value, headers))
    assert back == InputRecord(
        value=value, key=key, headers=headers, partition=2, timestamp_ms=1_700_000_000_000
    )


@given(
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=200),
    headers=st.lists(
        st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=4
    ).map(tuple),
)
def test_json_round_trip_any_bytes(
    key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes | None], ...]
) -> None:
    back = _round_trip_json(_record(key, value, headers))
    assert (back.key, back.value, back.headers) == (key, value, headers)


def test_kv_and_raw_output() -> None:
    assert format_record(_record(b"k", b"v"), "kv", b" => ") == b"k => v\n"
    assert format_record(_record(None, b"v"), "kv", b"\t") == b"null\tv\n"
    assert format_record(_record(b"k", None), "kv", b"\t") == b"k\tnull\n"
    assert format_record(_record(b"k", b"v"), "raw", b"\t") == b"v\n"
    assert format_record(_record(b"k", None), "raw", b"\t") == b"null\n"


def test_kv_round_trip_with_null_keys() -> None:
    for key, value in ((None, b"v1"), (b"k2", b"v:2"), (b"k3", None)):
        line = format_record(_record(key, value), "kv", b":")[:-1]
        back = parse_line(line, "kv", 1, b":", null_marker=b"null")
        assert (back.key, back.value) == (key, value)
    # Without a null marker, "null" is just text (Kafka's default).
    assert parse_line(b"null:v", "kv", 1, b":").key == b"null"


def test_kv_splits_at_the_first_separator_and_needs_one() -> None:
    assert parse_line(b"a:b:c", "kv", 1, b":") == InputRecord(value=b"b:c", key=b"a")
    with pytest.raises(InvalidRequestError, match="line 7: no key separator"):
        parse_line(b"no-separator", "kv", 7, b":")


def test_raw_input() -> None:
    assert parse_line(b"a\tb", "raw", 1) == InputRecord(value=b"a\tb")
    assert parse_line(b"null", "raw", 1, null_marker=b"null") == InputRecord(value=None)


def test_json_input_shorthands() -> None:
    record = parse_line(
        b'{"value": "v", "headers": {"a": "1", "b": null}, "partition": 0}', "json", 1
    )
    assert record == InputRecord(value=b"v", headers=(("a", b"1"), ("b", None)), partition=0)
    assert parse_line(b'{"value": null}', "json", 1) == InputRecord(value=None)
    explicit = parse_line(b'{"value": "aGk=", "value_encoding": "base64"}', "json", 1)
    assert explicit.value == b"hi"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"key": "k"}', 'no "value"'),
        (b'{"value": "v", "vaule": 1}', "unknown fields"),
        (b'{"value": 3}', '"value" must be a string'),
        (b'{"value": "!!", "value_encoding": "base64"}', "not valid base64"),
        (b'{"value": "v", "value_encoding": "hex"}', "value_encoding"),
        (b'{"value": "v", "partition": -1}', '"partition" must be null or an integer'),
        (b'{"value": "v", "partition": 2147483648}', '"partition" must be null or an integer'),
        (b'{"value": "v", "timestamp": "now"}', '"timestamp" must be null or an integer'),
        (
            b'{"value": "v", "timestamp": 99999999999999999999999}',
            '"timestamp" must be null or an integer from 0 to 9223372036854775807',
        ),
        (b'{"value": "v", "headers": [{"value": "x"}]}', "header"),
        (b'{"value": "\\ud800"}', "not valid Unicode"),
    ],
)
def test_bad_json_input_names_the_line(line: bytes, message: str) -> None:
    with pytest.raises(InvalidRequestError, match="line 12: ") as info:
        parse_line(line, "json", 12)
    assert message in str(info.value)


def test_encode_decode_bytes() -> None:
    assert encode_bytes(None) == (None, None)
    assert encode_bytes(b"abc") == ("abc", None)
    assert encode_bytes(b"\xff") == ("/w==", "base64")
    assert decode_bytes("/w==", "base64", "v") == b"\xff"
    assert decode_bytes("abc", "utf-8", "v") == b"abc"
    assert decode_bytes(None, "base64", "v") is None
