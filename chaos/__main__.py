"""``python -m chaos`` (also ``lograft chaos``): run a chaos scenario, or list them.

    python -m chaos list
    python -m chaos run --scenario kill-leader --duration 30 --seed 1 [--workload acks-all]
                        [--target local|compose] [--results chaos-results] [--json]
    python -m chaos suite --set short|long [--target local|compose] [--scenario NAME ...]
                          [--results chaos-results] [--update-docs docs/guarantees.md] [--json]

Exit code 0 when the checker found no anomaly, 1 when it found some, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chaos.runner import TARGETS, RunOptions, run
from chaos.scenarios import SCENARIOS, scenario
from chaos.suite import SETS, passed, results_table, run_set, update_guarantees
from chaos.workload import WORKLOADS

__all__ = ["main"]


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, not {text!r}")
    return key.strip(), value.strip()


# Over 70 lines: the list/run/suite argument tables and their dispatch, read top to bottom.
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the scenarios, one line each")
    run_parser = commands.add_parser("run", help="run one scenario and check its history")
    run_parser.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    run_parser.add_argument("--duration", type=float, default=30.0, help="seconds of load")
    run_parser.add_argument("--seed", type=int, default=0)
    run_parser.add_argument("--workload", choices=sorted(WORKLOADS), default="acks-all")
    run_parser.add_argument(
        "--target",
        choices=TARGETS,
        default="local",
        help="where the cluster runs: local processes, or docker-compose.yml (needs the image)",
    )
    run_parser.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="N CPU-bound processes spin beside the nodes for the whole run (a busy machine)",
    )
    run_parser.add_argument(
        "--node-config",
        action="append",
        default=[],
        type=_setting,
        metavar="KEY=VALUE",
        help="a node setting for this run (repeatable), e.g. broker.session.timeout.ms=6000",
    )
    run_parser.add_argument("--results", type=Path, default=Path("chaos-results"))
    run_parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    suite_parser = commands.add_parser("suite", help="run a set of scenarios (short: CI's)")
    suite_parser.add_argument("--set", choices=sorted(SETS), default="short")
    suite_parser.add_argument("--target", choices=TARGETS, help="only the runs on this target")
    suite_parser.add_argument(
        "--scenario", action="append", choices=sorted(SCENARIOS), help="only these scenarios"
    )
    suite_parser.add_argument("--results", type=Path, default=Path("chaos-results"))
    suite_parser.add_argument("--update-docs", type=Path, default=None, metavar="GUARANTEES_MD")
    suite_parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, description in SCENARIOS.items():
            only = "" if scenario(name).targets == TARGETS else " (local only)"
            print(f"{name:<18} {description}{only}")
        return 0
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if args.command == "suite":
        runs = [
            r
            for r in SETS[args.set]
            if (args.target is None or r.target == args.target)
            and (not args.scenario or r.scenario in args.scenario)
        ]

        def progress(summaries: list[dict[str, Any]]) -> None:
            print(results_table(summaries[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
            if args.update_docs is not None:  # a set cut short still leaves its table
                update_guarantees(args.update_docs, summaries)

        summaries = run_set(runs, args.results, progress)
        print(json.dumps(summaries, indent=2) if args.json else results_table(summaries))
        # Anomalies are expected where safety is traded away; not where lograft promises.
        return 0 if passed(summaries) else 1
    summary = run(
        RunOptions(
            scenario=args.scenario,
            seed=args.seed,
            duration_s=args.duration,
            workload=args.workload,
            results_dir=args.results,
            target=args.target,
            busy=args.busy,
            node_configs=tuple(args.node_config),
        )
    )
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        anomalies = {k: n for k, n in summary["anomalies"].items() if n}
        print(
            f"{summary['scenario']} ({summary['workload']}, seed {summary['seed']}, "
            f"{summary['duration_s']:g} s): {summary['operations']} operations, "
            f"{summary['faults']} faults, sends {summary['sends']}, "
            + (f"transactions {summary['txns']}, " if "txns" in summary else "")
            + f"anomalies: {anomalies or 'none'}, recovery ms by fault "
            f"{summary['recovery_ms_by_fault']}, cluster events {summary['events']}; "
            f"results in {summary['results']}"
        )
    return 0 if summary["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
