"""Kafka's wire protocol: message definitions (:mod:`.schema`) and their codec (:mod:`.codec`).

The first part of serving Kafka's own clients on lograft's ports (issue 43); the listener
that speaks it is not there yet.
"""
