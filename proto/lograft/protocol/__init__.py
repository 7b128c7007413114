"""What lograft speaks, imported by every other package and importing none of them.

Errors and their wire codes (:mod:`~lograft.protocol.errors`), the messages generated from
``proto/*.proto`` (:mod:`~lograft.protocol.wire`), the framed data-plane protocol
(:mod:`~lograft.protocol.framed`), Kafka's RecordBatch v2 format (records, varints, the
codec and its C speedups, the batch builder and header, control records, compression), and
the topic-partition and topic-config values.
"""
