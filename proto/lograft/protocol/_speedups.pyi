"""The record codec's hot loops in C (proto/lograft/protocol/_speedups.c); see its docstrings."""

from collections.abc import Sequence

def decode_records(
    record_type: type[tuple[object, ...]],
    topic: str,
    partition: int,
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    fixed_timestamp: int | None,
    last_offset_delta: int,
    start_offset: int,
    /,
) -> list[tuple[object, ...]] | None: ...
def encode_records(
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None,
    timestamps: Sequence[int] | None,
    base_timestamp: int,
    headers: Sequence[bytes] | None,
    /,
) -> bytes | None: ...
