"""The container's environment variables: the section of configuration.md for the image."""

from __future__ import annotations

from cluster.container import CONTAINER_DEFAULTS, OTHER_VARIABLES, env_name
from lograft.protocol.node_config import node_setting_names
from refgen.markdown import code_span, inline, table


def container_environment() -> list[str]:
    """The mapping from ``LOGRAFT_*`` variables to node settings, with the image's defaults."""
    lines = [
        "## Container environment (`cluster.container`)",
        "",
        "The image (`docker/Dockerfile`, `docker-compose.yml`) configures its node from "
        "environment variables: every setting `lograft node --config` accepts is read from "
        "`LOGRAFT_` + its name upper-cased with dots as underscores. The table is computed "
        "from `lograft.protocol.node_config.node_setting_names()`, as the entrypoint computes it; "
        "`docker run --rm lograft:latest settings` prints it. A `LOGRAFT_*` variable that "
        "names no setting stops the container. `HOSTNAME` is the container's hostname.",
        "",
    ]
    rows = [
        (
            code_span(env_name(name)),
            code_span(name),
            code_span(CONTAINER_DEFAULTS[name]) if name in CONTAINER_DEFAULTS else "",
        )
        for name in sorted(node_setting_names())
    ]
    rows += [
        (code_span(name), inline(f"not a setting: {meaning}"), "")
        for name, meaning in OTHER_VARIABLES.items()
    ]
    lines += table(("variable", "node setting", "container default"), rows)
    return lines
