"""Fixtures of the docker tests: the image ``make image`` builds and the compose cluster.

Without a docker engine these tests skip, unless ``LOGRAFT_REQUIRE_DOCKER=1`` (``.ci/run``
sets it): then they fail, so that a CI machine without docker cannot pass them by skipping.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from tests.docker.compose import ComposeCluster, build_image, docker_missing_reason

REQUIRE_DOCKER_ENV = "LOGRAFT_REQUIRE_DOCKER"


@pytest.fixture(scope="session")
def lograft_image() -> str:
    """Build the image with ``make image``'s script (cached layers make a rebuild quick)."""
    reason = docker_missing_reason()
    if reason is not None:
        if os.environ.get(REQUIRE_DOCKER_ENV) == "1":
            pytest.fail(f"{REQUIRE_DOCKER_ENV}=1 but {reason}")
        pytest.skip(reason)
    return build_image(sys.executable)


@pytest.fixture(scope="package")
def compose_cluster(
    lograft_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeCluster]:
    """The repository's docker-compose.yml, up and healthy, under a project of its own; one
    for the docker tests (bringing it up is the slow part, and every test leaves it healthy),
    taken down after the last of them so it costs the rest of the suite nothing."""
    cluster = ComposeCluster(f"lograft-test-{os.getpid()}", tmp_path_factory.mktemp("compose"))
    try:
        cluster.up()
    except BaseException:
        print(cluster.logs(), file=sys.stderr)
        cluster.down()
        raise
    try:
        yield cluster
    finally:
        cluster.down()
