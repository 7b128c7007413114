"""The ground floor every lograft package stands on.

``lograft.protocol`` is what lograft speaks: errors and their wire codes, the generated gRPC
messages, the framed data-plane protocol, and Kafka's record format. ``lograft.metadata`` is
the cluster metadata image and its records, which the controller writes and every broker
reads. Neither imports anything else of lograft's (decision 0020).
"""
