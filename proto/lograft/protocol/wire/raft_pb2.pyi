from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RaftEnvelope(_message.Message):
    __slots__ = ("cluster_id", "src", "dst", "epoch", "vote_request", "vote_response", "begin_quorum_epoch", "begin_quorum_epoch_response", "fetch_request", "fetch_response", "fetch_snapshot_request", "fetch_snapshot_response")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VOTE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    VOTE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    BEGIN_QUORUM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    BEGIN_QUORUM_EPOCH_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FETCH_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FETCH_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    FETCH_SNAPSHOT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    FETCH_SNAPSHOT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    src: int
    dst: int
    epoch: int
    vote_request: VoteRequest
    vote_response: VoteResponse
    begin_quorum_epoch: BeginQuorumEpoch
    begin_quorum_epoch_response: BeginQuorumEpochResponse
    fetch_request: FetchRequest
    fetch_response: FetchResponse
    fetch_snapshot_request: FetchSnapshotRequest
    fetch_snapshot_response: FetchSnapshotResponse
    def __init__(self, cluster_id: _Optional[str] = ..., src: _Optional[int] = ..., dst: _Optional[int] = ..., epoch: _Optional[int] = ..., vote_request: _Optional[_Union[VoteRequest, _Mapping]] = ..., vote_response: _Optional[_Union[VoteResponse, _Mapping]] = ..., begin_quorum_epoch: _Optional[_Union[BeginQuorumEpoch, _Mapping]] = ..., begin_quorum_epoch_response: _Optional[_Union[BeginQuorumEpochResponse, _Mapping]] = ..., fetch_request: _Optional[_Union[FetchRequest, _Mapping]] = ..., fetch_response: _Optional[_Union[FetchResponse, _Mapping]] = ..., fetch_snapshot_request: _Optional[_Union[FetchSnapshotRequest, _Mapping]] = ..., fetch_snapshot_response: _Optional[_Union[FetchSnapshotResponse, _Mapping]] = ...) -> None: ...

class RaftReply(_message.Message):
    __slots__ = ("messages", "rejected")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[RaftEnvelope]
    rejected: str
    def __init__(self, messages: _Optional[_Iterable[_Union[RaftEnvelope, _Mapping]]] = ..., rejected: _Optional[str] = ...) -> None: ...

class VoteRequest(_message.Message):
    __slots__ = ("last_epoch", "log_end_offset", "pre_vote")
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LOG_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    last_epoch: int
    log_end_offset: int
    pre_vote: bool
    def __init__(self, last_epoch: _Optional[int] = ..., log_end_offset: _Optional[int] = ..., pre_vote: _Optional[bool] = ...) -> None: ...

class VoteResponse(_message.Message):
    __slots__ = ("granted", "pre_vote")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    PRE_VOTE_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    pre_vote: bool
    def __init__(self, granted: _Optional[bool] = ..., pre_vote: _Optional[bool] = ...) -> None: ...

class BeginQuorumEpoch(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BeginQuorumEpochResponse(_message.Message):
    __slots__ = ("error_code", "leader_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    leader_id: int
    def __init__(self, error_code: _Optional[int] = ..., leader_id: _Optional[int] = ...) -> None: ...

class FetchRequest(_message.Message):
    __slots__ = ("fetch_offset", "last_fetched_epoch", "high_watermark", "max_wait_ticks")
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_TICKS_FIELD_NUMBER: _ClassVar[int]
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int
    max_wait_ticks: int
    def __init__(self, fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., high_watermark: _Optional[int] = ..., max_wait_ticks: _Optional[int] = ...) -> None: ...

class Entry(_message.Message):
    __slots__ = ("offset", "epoch", "data", "kind")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    offset: int
    epoch: int
    data: bytes
    kind: int
    def __init__(self, offset: _Optional[int] = ..., epoch: _Optional[int] = ..., data: _Optional[bytes] = ..., kind: _Optional[int] = ...) -> None: ...

class SnapshotId(_message.Message):
    __slots__ = ("end_offset", "epoch")
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    end_offset: int
    epoch: int
    def __init__(self, end_offset: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...

class FetchResponse(_message.Message):
    __slots__ = ("error_code", "leader_id", "fetch_offset", "last_fetched_epoch", "entries", "high_watermark", "diverging_epoch", "diverging_end_offset", "snapshot_id")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    FETCH_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_FETCHED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIVERGING_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    leader_id: int
    fetch_offset: int
    last_fetched_epoch: int
    entries: _containers.RepeatedCompositeFieldContainer[Entry]
    high_watermark: int
    diverging_epoch: int
    diverging_end_offset: int
    snapshot_id: SnapshotId
    def __init__(self, error_code: _Optional[int] = ..., leader_id: _Optional[int] = ..., fetch_offset: _Optional[int] = ..., last_fetched_epoch: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[Entry, _Mapping]]] = ..., high_watermark: _Optional[int] = ..., diverging_epoch: _Optional[int] = ..., diverging_end_offset: _Optional[int] = ..., snapshot_id: _Optional[_Union[SnapshotId, _Mapping]] = ...) -> None: ...

class FetchSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: SnapshotId
    def __init__(self, snapshot_id: _Optional[_Union[SnapshotId, _Mapping]] = ...) -> None: ...

class FetchSnapshotResponse(_message.Message):
    __slots__ = ("error_code", "leader_id", "snapshot")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    leader_id: int
    snapshot: Snapshot
    def __init__(self, error_code: _Optional[int] = ..., leader_id: _Optional[int] = ..., snapshot: _Optional[_Union[Snapshot, _Mapping]] = ...) -> None: ...

class Snapshot(_message.Message):
    __slots__ = ("end_offset", "epoch", "image")
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    end_offset: int
    epoch: int
    image: bytes
    def __init__(self, end_offset: _Optional[int] = ..., epoch: _Optional[int] = ..., image: _Optional[bytes] = ...) -> None: ...
