"""What tracing costs on the hot path: one run of 1,000 sequential trivial activities.

    python benchmarks/tracing_costs.py

Three processes, each on a fresh DuckDB file with ``durability="batched"`` (so that the engine's
own work, not the commit, dominates): OpenTelemetry absent (``sys.modules["opentelemetry"] =
None``), installed with no SDK configured (the global no-op provider), and an SDK provider with
a span processor that drops what it is given. Prints steps/s of each and the ratios to the first
(target: absent and no-op within noise of each other; the SDK's cost is the spans themselves).
Nothing here asserts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

STEPS = 1000

CHILD = """
import sys, time, json
mode, path, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "absent":
    sys.modules["opentelemetry"] = None
provider = None
if mode == "sdk":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
import wfkit as wf
reg = wf.ActivityRegistry()
reg.register("b.step", lambda ctx: None)
flow = wf.Workflow("bench").start_with("b.step", id="s0")
for i in range(1, steps):
    flow = flow.then("b.step", id=f"s{i}")
best = 0.0
for rep in range(3):
    engine = wf.Engine(
        f"{path}.{rep}", registry=reg, durability="batched", tracer_provider=provider
    )
    engine.register(flow)
    t0 = time.perf_counter()
    run = engine.start("bench", {})
    engine.run_until_idle()
    elapsed = time.perf_counter() - t0
    assert run.status.value == "completed", run.status
    engine.close()
    best = max(best, steps / elapsed)
print(json.dumps({"mode": mode, "steps_per_s": round(best)}))
"""


def main() -> None:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("absent", "noop", "sdk"):
            out = subprocess.run(
                [sys.executable, "-c", CHILD, mode, f"{tmp}/{mode}.duckdb", str(STEPS)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            line = json.loads(out.strip().splitlines()[-1])
            results[mode] = line["steps_per_s"]
            print(
                json.dumps(
                    {**line, "ratio_to_absent": round(line["steps_per_s"] / results["absent"], 3)}
                )
            )


if __name__ == "__main__":
    main()
