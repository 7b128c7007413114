"""Small raw-gRPC helpers for integration tests: produce, fetch everything, offsets."""

from __future__ import annotations

from lograft.protocol.records import Record, iter_records
from lograft.protocol.wire import broker_pb2 as pb
from lograft.protocol.wire import broker_pb2_grpc as pb_grpc

TIMEOUT_S = 30.0


def create_topic(
    stub: pb_grpc.BrokerStub, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    response = stub.CreateTopics(
        pb.CreateTopicsRequest(
            topics=[
                pb.CreatableTopic(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=1,
                    configs=configs or {},
                )
            ]
        ),
        timeout=TIMEOUT_S,
    )
    assert response.topics[0].error_code == 0, response


def produce(
    stub: pb_grpc.BrokerStub, topic: str, partition: int, records: bytes, acks: int = 1
) -> pb.PartitionProduceResponse:
    response = stub.Produce(
        pb.ProduceRequest(
            acks=acks,
            timeout_ms=30_000,
            topics=[
                pb.TopicProduceData(
                    name=topic,
                    partitions=[pb.PartitionProduceData(partition=partition, records=records)],
                )
            ],
        ),
        timeout=TIMEOUT_S,
    )
    result: pb.PartitionProduceResponse = response.topics[0].partitions[0]
    return result


def fetch_once(
    stub: pb_grpc.BrokerStub, topic: str, partition: int, offset: int, max_bytes: int = 1 << 20
) -> pb.FetchPartitionResponse:
    response = stub.Fetch(
        pb.FetchRequest(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=max_bytes,
            replica_id=-1,
            topics=[
                pb.FetchTopic(
                    name=topic,
                    partitions=[
                        pb.FetchPartition(
                            partition=partition,
                            fetch_offset=offset,
                            partition_max_bytes=max_bytes,
                            current_leader_epoch=-1,
                        )
                    ],
                )
            ],
        ),
        timeout=TIMEOUT_S,
    )
    result: pb.FetchPartitionResponse = response.topics[0].partitions[0]
    return result


def fetch_all(stub: pb_grpc.BrokerStub, topic: str, partition: int) -> list[Record]:
    """Every record from the log start to the high watermark."""
    records: list[Record] = []
    offset = list_offset(stub, topic, partition, -2)
    while True:
        result = fetch_once(stub, topic, partition, offset)
        assert result.error_code == 0, result
        batch = list(iter_records(result.records, offset))
        if not batch:
            assert offset == result.high_watermark, (offset, result.high_watermark)
            return records
        records.extend(batch)
        offset = batch[-1].offset + 1


def list_offset(stub: pb_grpc.BrokerStub, topic: str, partition: int, timestamp: int) -> int:
    response = stub.ListOffsets(
        pb.ListOffsetsRequest(
            topics=[
                pb.ListOffsetsTopic(
                    name=topic,
                    partitions=[pb.ListOffsetsPartition(partition=partition, timestamp=timestamp)],
                )
            ]
        ),
        timeout=TIMEOUT_S,
    )
    result = response.topics[0].partitions[0]
    assert result.error_code == 0, result
    return int(result.offset)
