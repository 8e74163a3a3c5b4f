"""A fan-out of CPU-bound steps on the engine's threads versus a local Dask cluster.

    PYTHONPATH=. python benchmarks/dask_fanout.py

Runs one ``for_each`` of 64 pure-Python steps (about 0.2 s of CPU each) on the engine's worker
threads (they share the GIL) and on a ``LocalCluster`` of 2 worker processes
(``wf.DaskExecutor``), then measures the overhead per trivial step sent to Dask (one at a time,
``max_parallelism=1``, against the same on threads) and the rate at which the writer commits
trivial steps run on threads (what one writer can carry). Prints one JSON line with the figures
and the ratio to the target (speed-up >= 1.8x; a ratio >= 1 meets it). Nothing here asserts.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

import wfkit as wf

ITEMS = 64
TARGET_SPEEDUP = 1.8
TRIVIAL = 100  # trivial steps one at a time, for the overhead per step
COMMITS = 2000  # trivial steps for the writer's commit rate


def spin(ctx: wf.ActivityContext[Any]) -> int:
    """About 0.2 s of pure-Python CPU work."""
    total = 0
    for i in range(ctx.data["loops"]):
        total += i * i % 7
    return total


def trivial(ctx: wf.ActivityContext[Any]) -> None:
    """Nothing at all."""


def calibrate(seconds: float = 0.2) -> int:
    loops = 200_000
    while True:
        began = time.perf_counter()
        total = 0
        for i in range(loops):
            total += i * i % 7
        took = time.perf_counter() - began
        if took > 0.05:
            return int(loops * seconds / took)
        loops *= 4


def fan_out(
    folder: Path,
    name: str,
    items: int,
    activity: Any,
    data: dict[str, Any],
    executor: wf.DaskExecutor | None,
    parallelism: int,
) -> float:
    registry = wf.ActivityRegistry()
    registry.register("step", activity)
    engine = wf.Engine(folder / f"{name}.duckdb", registry=registry, executor=executor)
    engine.register(
        wf.Workflow("fan")
        .start_with()
        .for_each("items", lambda b: b.then("step"), max_parallelism=parallelism)
    )
    engine.start_workers(threads=2)
    began = time.perf_counter()
    run = engine.start("fan", {**data, "items": list(range(items))})
    run.result(timeout=600)
    took = time.perf_counter() - began
    engine.close()
    return took


def main() -> dict[str, float]:
    distributed = __import__("distributed")
    loops = calibrate()
    data = {"loops": loops}
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        threads = fan_out(folder, "threads", ITEMS, spin, data, None, ITEMS)
        cluster = wf.DaskExecutor.local_cluster(
            n_workers=2, threads_per_worker=1, dashboard_address=":0"
        )
        with distributed.Client(cluster) as client:
            executor = wf.DaskExecutor(client)
            fan_out(folder, "warm", 4, trivial, {}, executor, 4)  # workers import wfkit once
            dask = fan_out(folder, "dask", ITEMS, spin, data, executor, ITEMS)
            one_dask = fan_out(folder, "one-dask", TRIVIAL, trivial, {}, executor, 1)
        cluster.close()
        one_threads = fan_out(folder, "one-threads", TRIVIAL, trivial, {}, None, 1)
        commits = fan_out(folder, "commits", COMMITS, trivial, {}, None, 64)
    speedup = threads / dask
    return {
        "items": ITEMS,
        "threads_s": round(threads, 2),
        "dask_2_workers_s": round(dask, 2),
        "speedup": round(speedup, 2),
        "speedup_ratio_to_target": round(speedup / TARGET_SPEEDUP, 2),
        "overhead_per_trivial_dask_step_ms": round((one_dask - one_threads) / TRIVIAL * 1000, 2),
        "trivial_step_one_at_a_time_dask_ms": round(one_dask / TRIVIAL * 1000, 2),
        "trivial_step_one_at_a_time_threads_ms": round(one_threads / TRIVIAL * 1000, 2),
        "writer_commits_steps_per_s": round(COMMITS / commits, 1),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
