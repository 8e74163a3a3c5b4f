"""How long a run takes to pass between two engines that serve different activity queues.

    python benchmarks/queues_handoff.py [ADMIN_URL] [STEPS]

One run of STEPS sequential trivial activities alternating between queue "default" and queue
"gpu", on a fresh PostgreSQL database: first one engine whose pool serves both queues (the step
to step gap is a checkpoint and a dispatch), then two engines, one serving "default" and one
"gpu" (every gap is also a hand-over: the run is released for the other queue, the other engine
is woken by NOTIFY, claims it and dispatches the step). The gap is measured inside the
activities, from the end of one to the start of the next. Prints JSON lines; asserts nothing.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import threading
import time
from typing import Any

from engine import postgres_database  # benchmarks/engine.py, beside this script

import wfkit as wf


def registry(marks: list[tuple[float, float]], lock: threading.Lock) -> wf.ActivityRegistry:
    reg = wf.ActivityRegistry()

    def step(ctx: wf.ActivityContext[Any]) -> None:
        began = time.perf_counter()
        with lock:
            marks.append((began, time.perf_counter()))

    reg.register("cpu", step)
    reg.register("gpu", step, queue="gpu")
    return reg


def chain(steps: int) -> wf.Workflow:
    flow = wf.Workflow("alternate").start_with("cpu")
    for i in range(1, steps):
        flow = flow.then("gpu" if i % 2 else "cpu")
    return flow


def measure(url: str, steps: int, split: bool) -> dict[str, Any]:
    marks: list[tuple[float, float]] = []
    lock = threading.Lock()
    reg = registry(marks, lock)
    engines = [wf.Engine(url, registry=reg)] + ([wf.Engine(url, registry=reg)] if split else [])
    try:
        engines[0].register(chain(steps))
        if split:
            engines[0].start_workers(2, queues=["default"])
            engines[1].start_workers(2, queues=["gpu"])
        else:
            engines[0].start_workers(2)
        began = time.perf_counter()
        run = engines[0].start("alternate", {})
        run.result(timeout=600)
        seconds = time.perf_counter() - began
    finally:
        for engine in engines:
            engine.close()
    gaps = sorted((b[0] - a[1]) * 1000 for a, b in itertools.pairwise(marks))
    return {
        "workload": "two engines, one queue each" if split else "one engine, both queues",
        "steps": steps,
        "seconds": round(seconds, 3),
        "gap_p50_ms": round(statistics.median(gaps), 2),
        "gap_p90_ms": round(gaps[int(len(gaps) * 0.9)], 2),
        "gap_max_ms": round(gaps[-1], 2),
    }


def main(argv: list[str]) -> None:
    admin = argv[0] if argv else "postgresql://postgres@127.0.0.1:5432/postgres"
    steps = int(argv[1]) if len(argv) > 1 else 200
    results = []
    for split in (False, True):
        with postgres_database(admin) as url:
            results.append(measure(url, steps, split))
        print(json.dumps(results[-1]), flush=True)
    extra = results[1]["gap_p50_ms"] - results[0]["gap_p50_ms"]
    print(json.dumps({"handoff_extra_p50_ms": round(extra, 2)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
