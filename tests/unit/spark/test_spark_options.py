"""The Spark data source's options: client settings with or without ``kafka.``."""

from __future__ import annotations

import pytest

from cluster.client.producer import PRODUCER_CONFIGS
from lograft.protocol.errors import InvalidConfigError
from spark.options import client_config, option, option_int


def test_client_settings_come_bare_or_kafka_prefixed_and_the_rest_is_left_alone() -> None:
    chosen = client_config(
        {"kafka.bootstrap.servers": "h:1", "Linger.MS": "7", "topic": "out", "checkpoint": "x"},
        PRODUCER_CONFIGS,
        "producer",
        fixed={"acks": "all"},
    )
    assert chosen == {"bootstrap.servers": "h:1", "linger.ms": "7", "acks": "all"}


def test_an_unknown_kafka_option_a_bad_value_or_a_fixed_one_changed_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=r"unknown producer config 'lingr\.ms'"):
        client_config({"kafka.lingr.ms": "5"}, PRODUCER_CONFIGS, "producer")
    with pytest.raises(InvalidConfigError, match=r"linger\.ms"):
        client_config({"linger.ms": "soon"}, PRODUCER_CONFIGS, "producer")
    with pytest.raises(InvalidConfigError, match="needs acks='all'"):
        client_config({"acks": "1"}, PRODUCER_CONFIGS, "producer", fixed={"acks": "all"})
    # The same setting spelt another way is no conflict.
    same = client_config({"acks": "-1"}, PRODUCER_CONFIGS, "producer", fixed={"acks": "all"})
    assert same == {"acks": "all"}


def test_options_are_read_case_insensitively_and_integers_checked() -> None:
    options = {"maxOffsetsPerTrigger": "10", "Topic": "out"}
    assert option(options, "topic") == "out"
    assert option_int(options, "maxoffsetspertrigger", 1) == 10
    assert option_int(options, "missing", 1) is None
    with pytest.raises(InvalidConfigError, match="at least 1"):
        option_int({"n": "0"}, "n", 1)
    with pytest.raises(InvalidConfigError, match="not an integer"):
        option_int({"n": "ten"}, "n", 1)
