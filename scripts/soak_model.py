"""Soak the engine against the reference model: thousands of generated cases.

    python scripts/soak_model.py --examples 5000 --backend duckdb|postgres|both --seed N

Cases come from the hypothesis strategies of tests/model (``cases()``), drawn with a fixed seed,
so a run is reproducible from its seed. Every disagreement is printed with the case (graph,
input, plan, schedule) and the differences; with ``--shrink`` the first one is also shrunk by
hypothesis to a minimal case. Exits 1 when any case disagrees.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, Phase, given, seed, settings

from tests.model.harness import check, database
from tests.model.strategies import Case, cases


def soak(examples: int, backend: str, start_seed: int, shrink: bool, show: int) -> int:
    """Run ``examples`` cases on ``backend``; return how many disagreed."""
    found: list[tuple[Case, list[str]]] = []
    stats: Counter[str] = Counter()
    began = time.monotonic()
    with database(backend) as fresh:

        @seed(start_seed)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink] if shrink else [Phase.generate],
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        )
        @given(cases())
        def run(case: Case) -> None:
            try:
                diffs = check(case, fresh(), stats)
            except Exception:
                diffs = ["the harness raised:\n" + traceback.format_exc()]
            done = sum(
                stats[s]
                for s in (
                    "completed",
                    "failed",
                    "waiting",
                    "suspended",
                    "compensating",
                    "running",
                    "cancelled",
                )
            )
            if done % 100 == 0:
                print(
                    f"  {backend}: {done} cases, {len(found)} disagreeing, "
                    f"{time.monotonic() - began:.0f} s",
                    flush=True,
                )
            if diffs and not shrink:
                found.append((case, diffs))
            assert not (diffs and shrink), case.describe() + "\n" + "\n".join(diffs)

        try:
            run()
        except AssertionError as exc:
            if shrink:
                print(f"minimal disagreement on {backend} (seed {start_seed}):\n{exc}")
                return 1
    for case, diffs in found[:show]:
        print(f"--- disagreement on {backend} (seed {start_seed}):\n{case.describe()}")
        print("\n".join(diffs))
    kinds = Counter(" + ".join(sorted({_what(d) for d in diffs})) for _, diffs in found)
    for kind, count in kinds.most_common():
        print(f"  {count} cases differ in {kind}")
    print(
        f"{backend}: {examples} cases in {time.monotonic() - began:.0f} s; final statuses "
        f"{dict(stats)}; {len(found)} disagreeing"
    )
    return len(found)


def _what(diff: str) -> str:
    """What a difference is about: status, data, outputs, compensations or calls."""
    if diff.startswith("after event"):
        return "status during the schedule"
    return diff.split(":")[0].split(" (")[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--backend", choices=("duckdb", "postgres", "both"), default="duckdb")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shrink", action="store_true", help="shrink the first disagreement")
    parser.add_argument("--show", type=int, default=20, help="disagreements to print in full")
    args = parser.parse_args()
    backends = ("duckdb", "postgres") if args.backend == "both" else (args.backend,)
    bad = sum(soak(args.examples, b, args.seed, args.shrink, args.show) for b in backends)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
