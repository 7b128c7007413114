from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class NodeHealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeHealthResponse(_message.Message):
    __slots__ = ("node_id", "roles", "in_quorum", "cluster_id", "listener", "broker_epoch", "fenced", "metadata_applied_offset", "metadata_high_watermark", "quorum_leader_id", "quorum_epoch")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    IN_QUORUM_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    LISTENER_FIELD_NUMBER: _ClassVar[int]
    BROKER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FENCED_FIELD_NUMBER: _ClassVar[int]
    METADATA_APPLIED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    METADATA_HIGH_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    QUORUM_LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    QUORUM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    roles: _containers.RepeatedScalarFieldContainer[str]
    in_quorum: bool
    cluster_id: str
    listener: str
    broker_epoch: int
    fenced: bool
    metadata_applied_offset: int
    metadata_high_watermark: int
    quorum_leader_id: int
    quorum_epoch: int
    def __init__(self, node_id: _Optional[int] = ..., roles: _Optional[_Iterable[str]] = ..., in_quorum: _Optional[bool] = ..., cluster_id: _Optional[str] = ..., listener: _Optional[str] = ..., broker_epoch: _Optional[int] = ..., fenced: _Optional[bool] = ..., metadata_applied_offset: _Optional[int] = ..., metadata_high_watermark: _Optional[int] = ..., quorum_leader_id: _Optional[int] = ..., quorum_epoch: _Optional[int] = ...) -> None: ...
