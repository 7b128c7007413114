"""The five layers of DESIGN.md ("Layers"), enforced on every first-party module.

``LAYERS`` places each module, by a path glob, in one layer; the first matching row wins.
Three rules follow from it:

* every module of ``lograft`` (under ``proto/``), ``cluster``, ``controller``, ``replica``,
  ``spark`` and ``chaos`` is placed
  (a new file fails until a row covers it, so each new module is placed on purpose);
* imports point down: a module imports only from its own layer or the layers below it.
  Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``, so those count too;
* the pure cores read no clock, open no socket or file, start no thread and use no global
  random: ``now_ms`` and a ``random.Random`` come in as arguments (DESIGN.md, "Pure cores,
  thin shells"). Some cores are held tighter still (``CORE_DEPENDENCIES``).

Imports under ``if TYPE_CHECKING:`` are ignored: they never run. Edges that are wrong today
but wait on a file someone else owns are listed, each with its reason, in
``KNOWN_VIOLATIONS``; the test fails once one of them is gone, so the list only shrinks.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from tests.unit.imports_model import (
    PACKAGES,
    Module,
    first_party_modules,
    import_cycles,
    imports,
    runtime_nodes,
)


class Layer(enum.IntEnum):
    """DESIGN.md's layers, bottom first: a module may import its own layer and lower ones."""

    PROTOCOL = 1
    CORE = 2
    STORAGE = 3
    SHELL = 4
    NODE = 5


LAYERS: tuple[tuple[str, Layer], ...] = (
    # -- 1. Protocol: the vocabulary every layer speaks. Imports no other first-party layer.
    # The package roots run on every import of a submodule, so they import nothing.
    ("cluster/__init__.py", Layer.PROTOCOL),
    ("controller/__init__.py", Layer.PROTOCOL),
    ("replica/__init__.py", Layer.PROTOCOL),
    ("proto/lograft/__init__.py", Layer.PROTOCOL),
    # Errors and their wire codes, the generated messages, the framed protocol, the record
    # format, topic-partition and topic-config values: one package, importing no other.
    ("proto/lograft/protocol/*", Layer.PROTOCOL),
    # The checked field codec of the coordinators' records: both the group and the
    # transaction coordinator cores use it, and neither may import the other.
    ("replica/coordinator_record_fields.py", Layer.PROTOCOL),
    ("controller/*/errors.py", Layer.PROTOCOL),  # the per-domain error modules
    ("replica/*/errors.py", Layer.PROTOCOL),
    # -- 2. Pure cores: inputs in, decisions out; no clock, socket, thread, disk, global random.
    ("controller/raft/*", Layer.CORE),
    ("proto/lograft/metadata/*", Layer.CORE),
    ("controller/logic/*", Layer.CORE),
    ("replica/replication/*", Layer.CORE),
    ("replica/group/*", Layer.CORE),
    ("replica/txn/*", Layer.CORE),  # the transaction coordinator
    # When a coordinator may answer (its broker still leads its partition at the epoch it
    # loaded): the rule both coordinator cores share, neither importing the other.
    ("replica/coordinator_leadership.py", Layer.CORE),
    ("replica/producer_state.py", Layer.CORE),
    # The producer state's snapshot bytes and their checks; pure, beside the state it encodes.
    ("replica/producer_snapshot_codec.py", Layer.CORE),
    ("replica/partition_roles.py", Layer.CORE),  # metadata image -> local partition roles
    ("replica/produce_validation.py", Layer.CORE),  # what a leader checks in produced bytes
    ("cluster/client/_sequencing.py", Layer.CORE),  # the idempotent producer's sequences
    ("cluster/broker_lease.py", Layer.CORE),  # how long a broker may trust its leaderships
    # -- 3. Storage: the partition log and the metadata log, on disk.
    ("replica/log/*", Layer.STORAGE),
    ("replica/producer_snapshots.py", Layer.STORAGE),
    ("controller/storage/*", Layer.STORAGE),
    ("proto/lograft/durable.py", Layer.STORAGE),  # atomic files, directory fsyncs
    # -- 4. Shells: asyncio + gRPC around a core; translate, call the core, perform its output.
    ("replica/partition.py", Layer.SHELL),
    ("replica/group_commit.py", Layer.SHELL),  # one fdatasync answers many appends' waits
    ("replica/partition_waiters.py", Layer.SHELL),  # held fetches and acks=all produces
    ("replica/fetcher.py", Layer.SHELL),
    ("replica/follower_fetch.py", Layer.SHELL),  # the fetcher's per-partition step
    ("replica/broker_service.py", Layer.SHELL),
    ("replica/broker_rpcs.py", Layer.SHELL),  # what the broker servicer's parts share
    ("replica/clocks.py", Layer.SHELL),  # the wall clock and the replication (monotonic) clock
    ("replica/outcomes.py", Layer.SHELL),  # awaiting several things, keeping each failure
    ("replica/flush_worker.py", Layer.SHELL),  # the C fsync thread's jobs, on the event loop
    ("replica/data_plane_rpcs.py", Layer.SHELL),  # Produce, Fetch, ListOffsets
    ("replica/record_rpcs.py", Layer.SHELL),  # ProduceRecords, FetchRecords (over the above)
    ("replica/admin_rpcs.py", Layer.SHELL),  # metadata, topics, producer ids, configs
    ("replica/group_rpcs.py", Layer.SHELL),  # the consumer-group RPCs
    ("replica/group_service.py", Layer.SHELL),
    ("replica/coordinator_log.py", Layer.SHELL),  # coordinators' internal-topic reads/writes
    ("replica/txn_service.py", Layer.SHELL),  # the transaction coordinator's shell
    ("replica/txn_rpcs.py", Layer.SHELL),  # the transaction RPCs and WriteTxnMarkers
    ("replica/log_manager.py", Layer.SHELL),
    ("replica/log_cleaner_loop.py", Layer.SHELL),
    ("replica/producer_ids.py", Layer.SHELL),  # producer-id blocks: controller RPC or a file
    ("controller/quorum/*", Layer.SHELL),
    ("cluster/halt.py", Layer.SHELL),
    # -- 5. Node and tools: the process, and what users run.
    ("cluster/node.py", Layer.NODE),
    ("cluster/allocator.py", Layer.NODE),  # the node process's malloc thresholds
    ("cluster/loop_monitor.py", Layer.NODE),  # the event loop's lag, logged
    ("cluster/node_health.py", Layer.NODE),  # NodeHealth: the service and `lograft node health`
    ("cluster/container.py", Layer.NODE),  # the image's entrypoint: env -> lograft node
    ("cluster/kraft_broker.py", Layer.NODE),
    ("cluster/broker_frontend.py", Layer.NODE),  # the broker's ClusterFrontend answers
    ("cluster/controller_client.py", Layer.NODE),  # calls to the active controller
    ("cluster/txn_peers.py", Layer.NODE),  # markers and KIP-890 checks to other brokers
    ("cluster/launcher*", Layer.NODE),
    ("cluster/client/*", Layer.NODE),
    ("cluster/cli/*", Layer.NODE),
    ("cluster/rest_proxy/*", Layer.NODE),  # lograft rest-proxy: HTTP/JSON over the client
    ("cluster/demo.py", Layer.NODE),
    ("cluster/status.py", Layer.NODE),
    ("chaos/*", Layer.NODE),
    ("spark/*", Layer.NODE),
)

CORE_DEPENDENCIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    # Cores that stand alone: besides the standard library they import only these (and
    # their submodules). Raft knows nothing of metadata; replication and groups know
    # nothing of the log or of each other.
    ("controller/raft/*", ("controller.raft", "lograft.protocol.errors")),
    ("replica/replication/*", ("replica.replication", "lograft.protocol.errors")),
    # Both coordinators' records share their field codec, replica.coordinator_record_fields,
    # and their leadership rule, replica.coordinator_leadership.
    (
        "replica/group/*",
        (
            "replica.group",
            "lograft.protocol.topic_partition",
            "replica.coordinator_record_fields",
            "replica.coordinator_leadership",
            "lograft.protocol.errors",
        ),
    ),
    (
        "replica/txn/*",
        (
            "replica.txn",
            "lograft.protocol.topic_partition",
            "replica.coordinator_record_fields",
            "replica.coordinator_leadership",
            "lograft.protocol.errors",
        ),
    ),
    ("replica/coordinator_leadership.py", ("lograft.protocol.errors",)),
)

FORBIDDEN_IN_CORES = frozenset(
    {
        "asyncio",
        "concurrent",
        "datetime",
        "grpc",
        "io",
        "multiprocessing",
        "os",
        "pathlib",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "subprocess",
        "sys",
        "tempfile",
        "threading",
        "time",
    }
)
FORBIDDEN_CALLS_IN_CORES = frozenset({"open", "print", "input", "eval", "exec", "__import__"})
FORBIDDEN_IN_CORES_TOO = frozenset({"secrets", "ctypes"})
"""Randomness from the OS, and raw memory: a core's output must follow from its inputs."""
FORBIDDEN_ATTRIBUTES_IN_CORES = frozenset({"uuid.uuid1", "uuid.uuid4", "logging.getLogger"})
"""Fresh ids come from the caller (a seeded simulation must replay them), and so does the
logger: a core logs through the one its shell gives it (the shell names it, and a
simulation can tell its nodes apart)."""

# What each package of the node-and-tools layer may import, besides its own modules and the
# standard library and third-party packages: the first row whose glob matches the module's
# path names every first-party prefix it may import (its own among them).
# The client is what users import, so it stands on the protocol alone; the tools build on
# the client; only the node (and the chaos suite, which reads replicas' files) sees inside.
NODE_MODULES = (
    "cluster.node",
    "cluster.kraft_broker",
    "cluster.broker_frontend",
    "cluster.controller_client",
    "cluster.txn_peers",
    "cluster.broker_lease",
    "cluster.halt",
    "cluster.allocator",
    "cluster.loop_monitor",
    "cluster.node_health",
    "cluster.container",
)
PACKAGE_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("cluster/client/*", "the client", ("cluster.client", "lograft.protocol")),
    (
        "cluster/cli/*",
        "the CLI",
        (
            "cluster.cli",
            "lograft.protocol",
            "cluster.client",
            "cluster.launcher",
            "cluster.rest_proxy",
        ),
    ),
    (
        "cluster/rest_proxy/*",
        "the REST proxy",
        ("cluster.rest_proxy", "lograft.protocol", "cluster.client"),
    ),
    (
        "cluster/launcher/*",
        "the launcher",
        (
            "cluster.launcher",
            "lograft.protocol",
            "lograft.durable",
            "cluster.client",
            "cluster.status",
            "cluster.node_health",
        ),
    ),
    ("cluster/demo.py", "the demo", ("lograft.protocol", "cluster.client", "cluster.launcher")),
    ("cluster/status.py", "cluster status", ("lograft.protocol", "cluster.client")),
    ("spark/*", "the Spark connector", ("lograft.protocol", "cluster.client")),
    (
        "chaos/*",
        "the chaos suite",
        (
            "lograft.protocol",
            "cluster.client",
            "cluster.launcher",
            "cluster.container",
            "cluster.node",
            "replica.log",
        ),
    ),
    ("cluster/*", "the node", ("lograft", "controller", "replica", *NODE_MODULES)),
)
OUTSIDE_THE_LIBRARY = frozenset({"tests", "bench", "docs"})
"""Top-level directories of the repository that no library module may import."""
KNOWN_CYCLES: Mapping[tuple[str, ...], str] = {
    # (modules, sorted): why the loop is still there. Remove a row once it is fixed.
}

KNOWN_VIOLATIONS: Mapping[tuple[str, str], str] = {
    # (importer, imported): why it is still here. Remove a row once it is fixed.
}


@dataclass(frozen=True)
class Violation:
    """A broken rule: ``(importer, imported)`` is the key ``KNOWN_VIOLATIONS`` uses."""

    importer: str
    imported: str
    message: str


def layer_of(path: str) -> Layer | None:
    """The layer of the first ``LAYERS`` row whose glob matches ``path``; ``None``: unplaced."""
    for pattern, layer in LAYERS:
        if fnmatchcase(path, pattern):
            return layer
    return None


def _with_parents(importer: str, imported: str) -> Iterator[tuple[str, bool]]:
    """``imported``, then the packages whose ``__init__`` importing it runs (``True``).

    The importer's own packages are left out: they ran before the importer did.
    """
    yield imported, False
    parts = imported.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        if not f"{importer}.".startswith(f"{parent}."):
            yield parent, True


def check(modules: Mapping[str, Module]) -> list[Violation]:
    """Every broken rule over ``modules`` (which must include every module imported)."""
    violations: list[Violation] = []
    for module in modules.values():
        layer = layer_of(module.path)
        if layer is None:
            violations.append(
                Violation(module.name, "", f"{module.path} is in no layer: add it to LAYERS")
            )
            continue
        for imported, line in imports(module, modules):
            where = f"{module.path}:{line}"
            top = imported.split(".")[0]
            if top in PACKAGES:
                violations.extend(_check_edge(module, layer, imported, where, modules))
                violations.extend(_check_package_rule(module, imported, where))
            elif top in OUTSIDE_THE_LIBRARY:
                violations.append(
                    Violation(module.name, imported, f"{where}: library code imports {imported}")
                )
            elif layer is Layer.CORE and top in FORBIDDEN_IN_CORES | FORBIDDEN_IN_CORES_TOO:
                violations.append(
                    Violation(module.name, imported, f"{where}: a pure core imports {imported}")
                )
        if layer is Layer.CORE:
            violations.extend(_check_core_body(module))
    return violations


def _check_package_rule(module: Module, imported: str, where: str) -> Iterator[Violation]:
    """An import of another first-party package that the importer's package rule omits."""
    if imported.split(".")[0] == module.name.split(".")[0] and not module.path.startswith(
        "cluster/"
    ):
        return  # within its own package (cluster's parts have rules of their own)
    for pattern, label, allowed in PACKAGE_RULES:
        if not fnmatchcase(module.path, pattern):
            continue
        if any(imported == p or imported.startswith(f"{p}.") for p in allowed):
            return
        yield Violation(
            module.name,
            imported,
            f"{where}: {module.name} imports {imported}; {label} may import only "
            f"{', '.join(allowed)}",
        )
        return


def _check_edge(
    module: Module, layer: Layer, imported: str, where: str, modules: Mapping[str, Module]
) -> Iterator[Violation]:
    if imported not in modules and not any(t in modules for t, _ in _with_parents("", imported)):
        yield Violation(module.name, imported, f"{where}: {imported} does not exist")
        return
    for target, implicit in _with_parents(module.name, imported):
        if target not in modules:
            continue
        target_layer = layer_of(modules[target].path)
        if target_layer is not None and target_layer > layer:
            via = f" through the package {target}" if implicit else ""
            yield Violation(
                module.name,
                imported,
                f"{where}: {module.name} ({layer.value} {layer.name}) imports {imported} "
                f"({target_layer.value} {target_layer.name}){via}: imports must point down",
            )
            break
    for pattern, allowed in CORE_DEPENDENCIES:
        if fnmatchcase(module.path, pattern) and not any(
            imported == prefix or imported.startswith(f"{prefix}.") for prefix in allowed
        ):
            yield Violation(
                module.name,
                imported,
                f"{where}: {module.name} imports {imported}; this core may import only "
                f"{', '.join(allowed)}",
            )


def _check_core_body(module: Module) -> Iterator[Violation]:
    """``random`` only as the ``random.Random`` type, never called; no I/O builtins."""
    nodes = list(runtime_nodes(ast.parse(module.source, module.path)))
    random_modules = {"random"}  # names bound to the random module
    random_classes = {"Random"}  # names bound to random.Random
    for node in nodes:
        if isinstance(node, ast.Import):
            random_modules.update(a.asname for a in node.names if a.name == "random" and a.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "random" and not node.level:
            random_classes.update(a.asname for a in node.names if a.name == "Random" and a.asname)
    # ``random.Random`` in an annotation or isinstance is the type; anything else is the module.
    as_type = {
        id(node.value)
        for node in nodes
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        if node.value.id in random_modules and node.attr == "Random"
    }
    for node in nodes:
        where = f"{module.path}:{getattr(node, 'lineno', 0)}"
        banned = _banned_attribute(node)
        if banned is not None:
            yield Violation(module.name, banned, f"{where}: a pure core uses {banned}")
        if isinstance(node, ast.ImportFrom) and node.module == "random" and not node.level:
            for alias in node.names:
                if alias.name != "Random":
                    yield Violation(
                        module.name, f"random.{alias.name}", f"{where}: imports random.{alias.name}"
                    )
        elif (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in random_modules
            and id(node) not in as_type
        ):
            use = "random"
            parent = next(
                (n for n in nodes if isinstance(n, ast.Attribute) and n.value is node), None
            )
            if parent is not None:
                use = f"random.{parent.attr}"
            yield Violation(
                module.name, use, f"{where}: uses {use}, the global RNG: take a random.Random"
            )
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS_IN_CORES:
                yield Violation(module.name, func.id, f"{where}: a pure core calls {func.id}()")
            elif (isinstance(func, ast.Name) and func.id in random_classes) or id(
                getattr(func, "value", None)
            ) in as_type:
                yield Violation(
                    module.name,
                    "random.Random",
                    f"{where}: makes its own random.Random: take the caller's",
                )


def _banned_attribute(node: ast.AST) -> str | None:
    """``uuid.uuid4``, ``logging.getLogger``, ... as an attribute or a name imported."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        name = f"{node.value.id}.{node.attr}"
        return name if name in FORBIDDEN_ATTRIBUTES_IN_CORES else None
    if isinstance(node, ast.ImportFrom) and node.module and not node.level:
        for alias in node.names:
            if f"{node.module}.{alias.name}" in FORBIDDEN_ATTRIBUTES_IN_CORES:
                return f"{node.module}.{alias.name}"
    return None


def _format(violations: list[Violation]) -> str:
    return "\n".join(sorted(v.message for v in violations))


MODULES = first_party_modules()
VIOLATIONS = check(MODULES)


def test_the_table_sees_the_packages() -> None:
    """Guard against the discovery silently finding nothing."""
    assert {"cluster.node", "controller.raft.node", "replica.log.segment"} <= MODULES.keys()
    assert {Layer(layer) for _, layer in LAYERS} == set(Layer)


def test_every_module_is_in_a_layer() -> None:
    """A new module fails here until a row of ``LAYERS`` places it."""
    unplaced = [v for v in VIOLATIONS if not v.imported]
    assert not unplaced, _format(unplaced)


def test_imports_point_down_and_the_cores_are_pure() -> None:
    """No upward import, no I/O, clock, thread or global random in a core (but the known)."""
    new = [v for v in VIOLATIONS if v.imported and (v.importer, v.imported) not in KNOWN_VIOLATIONS]
    assert not new, _format(new)


def test_known_violations_are_still_there() -> None:
    """A fixed known violation is taken off the list, so the list only shrinks."""
    found = {(v.importer, v.imported) for v in VIOLATIONS}
    fixed = sorted(set(KNOWN_VIOLATIONS) - found)
    assert not fixed, f"fixed, remove from KNOWN_VIOLATIONS: {fixed}"


def test_the_checker_catches_violations() -> None:
    """Each rule fires on a made-up module, and ``if TYPE_CHECKING:`` imports do not."""
    fake = {
        m.name: m
        for m in (
            Module("cluster.node", "cluster/node.py", ""),
            Module("replica.partition", "replica/partition.py", ""),
            Module("controller.raft", "controller/raft/__init__.py", ""),
            Module("controller.raft.errors", "controller/raft/errors.py", ""),
            Module("lograft.metadata.image", "proto/lograft/metadata/image.py", ""),
            Module("replica.new_thing", "replica/new_thing.py", ""),
            Module(
                "replica.partition_roles",
                "replica/partition_roles.py",
                "from typing import TYPE_CHECKING\n"
                "import time\n"
                "import random as rnd\n"
                "from cluster.node import Node\n"
                "from random import Random, choice\n"
                "if TYPE_CHECKING:\n"
                "    import os\n"
                "    from replica.partition import Partition\n"
                "def f(rng: rnd.Random) -> None:\n"
                "    import threading\n"
                "    rnd.shuffle([])\n"
                "    print(open('x'))\n"
                "    isinstance(rng, rnd.Random) and isinstance(rng, Random)\n"
                "    f(rnd)\n"
                "    rnd.Random(1)\n"
                "    Random()\n",
            ),
            Module("replica.log.segment", "replica/log/segment.py", "from ..partition import P\n"),
            Module(
                "lograft.protocol.errors",
                "proto/lograft/protocol/errors.py",
                "from controller.raft import errors\n",
            ),
            Module(
                "controller.raft.node",
                "controller/raft/node.py",
                "from . import errors\nfrom lograft.metadata.image import MetadataImage\n",
            ),
        )
    }
    found = {(v.importer, v.imported) for v in check(fake)}
    assert found == {
        ("replica.new_thing", ""),  # unplaced
        ("replica.partition_roles", "time"),
        ("replica.partition_roles", "threading"),  # imported inside a function: still runs
        ("replica.partition_roles", "cluster.node"),  # 2 -> 5
        ("replica.partition_roles", "random.choice"),
        ("replica.partition_roles", "random.shuffle"),  # global RNG through an alias
        ("replica.partition_roles", "print"),
        ("replica.partition_roles", "open"),
        ("replica.partition_roles", "random"),  # the module handed on
        ("replica.partition_roles", "random.Random"),  # its own RNG
        ("replica.log.segment", "replica.partition"),  # relative import, 3 -> 4
        # 1 -> 2 through controller/raft/__init__
        ("lograft.protocol.errors", "controller.raft.errors"),
        ("controller.raft.node", "lograft.metadata.image"),  # outside raft's dependencies
    }
    messages = _format(check(fake))
    assert "replica.partition_roles (2 CORE) imports cluster.node (5 NODE)" in messages
    assert "replica/log/segment.py:1" in messages
    assert "(2 CORE) through the package controller.raft" in messages
    assert messages.count("makes its own random.Random") == 2


CYCLES = import_cycles(MODULES)


def test_no_module_imports_itself_around_a_loop() -> None:
    """Import cycles, ``if TYPE_CHECKING:`` imports included (they tie the definitions
    together as much as runtime ones), except the known ones."""
    new = [" -> ".join(c) for c in CYCLES if c not in KNOWN_CYCLES]
    assert not new, "import cycles:\n" + "\n".join(new)
    fixed = sorted(set(KNOWN_CYCLES) - set(CYCLES))
    assert not fixed, f"fixed, remove from KNOWN_CYCLES: {fixed}"


def test_the_package_rules_and_the_cycle_check_catch_violations() -> None:
    """A client module importing the broker, a library module importing the tests, a
    missing module, and a loop of two modules through ``if TYPE_CHECKING:``."""
    fake = {
        m.name: m
        for m in (
            Module("replica.partition", "replica/partition.py", ""),
            Module("lograft.protocol.errors", "proto/lograft/protocol/errors.py", ""),
            Module(
                "cluster.client.producer",
                "cluster/client/producer.py",
                "from replica.partition import Partition\n"
                "from lograft.protocol.errors import LograftError\n"
                "from tests.unit.broker_fixtures import Image\n"
                "from cluster.client.gone import nothing\n"
                "from cluster.client.consumer import Consumer\n",
            ),
            Module(
                "cluster.client.consumer",
                "cluster/client/consumer.py",
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from cluster.client.producer import Producer\n",
            ),
            Module("spark.sink", "spark/sink.py", "from cluster.node import Node\n"),
            Module("cluster.node", "cluster/node.py", "from cluster.cli import main\n"),
            Module("cluster.cli", "cluster/cli/__init__.py", ""),
        )
    }
    found = {(v.importer, v.imported) for v in check(fake)}
    assert found == {
        ("cluster.client.producer", "replica.partition"),  # the client sees the broker
        ("cluster.client.producer", "tests.unit.broker_fixtures"),
        ("cluster.client.producer", "cluster.client.gone"),  # does not exist
        ("spark.sink", "cluster.node"),
        ("cluster.node", "cluster.cli"),
    }
    assert import_cycles(fake) == [("cluster.client.consumer", "cluster.client.producer")]
