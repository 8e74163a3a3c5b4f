"""What a large for_each costs: one run over 10,000 items, four at a time, on a DuckDB file.

    python benchmarks/for_each_costs.py            # 10,000 items
    python benchmarks/for_each_costs.py 2000       # another count

Prints one JSON line: seconds, steps per second, the bytes of cursor deltas written to
wf_events (all checkpoints), the largest delta after the first checkpoint, and the ratios to the
targets (at most 1 meets a target). Before the item list left the frame, every checkpoint
rewrote it: 10,000 items took 88 s and wrote 349 MB of deltas. Nothing here asserts.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import wfkit as wf

TARGET_SECONDS = 15.0  # 10,000 steps at the engine's inline rate, with room to spare
TARGET_DELTA_BYTES = 20_000_000  # a few hundred bytes per checkpoint


def main(count: int) -> dict[str, float]:
    registry = wf.ActivityRegistry()
    registry.register("work", lambda ctx: None)
    with tempfile.TemporaryDirectory() as folder:
        engine = wf.Engine(Path(folder) / "runs.duckdb", registry=registry)
        engine.register(
            wf.Workflow("many")
            .start_with()
            .for_each("items", lambda b: b.then("work"), max_parallelism=4)
        )
        items = list(range(count))  # 10,000 items fit the 256 KiB document limit
        began = time.perf_counter()
        run = engine.start("many", {"items": items})
        engine.run_until_idle()
        took = time.perf_counter() - began
        assert run.status == wf.RunStatus.COMPLETED, run.status
        sizes = [
            size
            for (size,) in engine.sql(
                f"SELECT length(delta) FROM wf_events WHERE run_id = '{run.id}' "
                "AND delta IS NOT NULL ORDER BY seq"
            ).fetchall()
        ]
        engine.close()
    scale = count / 10_000
    return {
        "items": count,
        "seconds": round(took, 2),
        "steps_per_s": round(count / took),
        "delta_bytes": sum(sizes),
        "largest_later_delta": max(sizes[1:], default=0),
        "seconds_ratio": round(took / (TARGET_SECONDS * scale), 2),
        "delta_ratio": round(sum(sizes) / (TARGET_DELTA_BYTES * scale), 3),
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)))
