"""Scale-out benchmark: W2 (1,000 runs of 3 trivial steps) on one PostgreSQL database advanced by
1, 2 and 4 worker processes, and the same workload on DuckDB in one process, for comparison.

    python benchmarks/scale.py                  # needs a PostgreSQL server (see below)
    WFKIT_BENCH_POSTGRES=postgresql://user@host/postgres python benchmarks/scale.py

Prints JSON lines: runs completed per second for each worker count and the speed-up over one
worker. Nothing is asserted.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

import wfkit as wf

ADMIN = os.environ.get("WFKIT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")
RUNS = 1000
THREADS = 2  # worker threads per process


@wf.activity("scale.noop")
def noop(ctx: wf.ActivityContext[dict]) -> None:
    return None


FLOW = wf.Workflow("w2", 1).start_with("scale.noop").then("scale.noop").then("scale.noop")


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def worker(url: str, stop: multiprocessing.synchronize.Event) -> None:
    engine = wf.Engine(url, lease="10s")
    engine.register(FLOW)
    engine.start_workers(THREADS)
    stop.wait()
    engine.stop()
    engine.close()


def completed(engine: wf.Engine) -> int:
    rows = engine.sql("SELECT count(*) FROM wf_instances WHERE status = 'completed'").fetchall()
    return int(rows[0][0])


def postgres_run(processes: int) -> float:
    name = f"wfkit_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{ADMIN.rpartition('/')[0]}/{name}"
    try:
        client = wf.Engine(url)
        client.register(FLOW)
        stop = multiprocessing.Event()
        procs = [multiprocessing.Process(target=worker, args=(url, stop)) for _ in range(processes)]
        for p in procs:
            p.start()
        time.sleep(1.5)  # let the workers open their engines before the clock starts
        started = time.perf_counter()
        client.start_many("w2", [{} for _ in range(RUNS)])
        while completed(client) < RUNS:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        stop.set()
        for p in procs:
            p.join(30)
        client.close()
        return elapsed
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def duckdb_run() -> float:
    with tempfile.TemporaryDirectory() as folder:
        engine = wf.Engine(Path(folder) / "w2.duckdb")
        engine.register(FLOW)
        started = time.perf_counter()
        engine.start_many("w2", [{} for _ in range(RUNS)])
        engine.run_until_idle()
        elapsed = time.perf_counter() - started
        assert completed(engine) == RUNS
        engine.close()
        return elapsed


def main() -> None:
    base = None
    for processes in (1, 2, 4):
        elapsed = postgres_run(processes)
        rate = RUNS / elapsed
        base = base or rate
        emit(
            backend="postgres",
            processes=processes,
            threads_each=THREADS,
            runs=RUNS,
            seconds=round(elapsed, 2),
            runs_per_s=round(rate),
            speedup=round(rate / base, 2),
        )
    elapsed = duckdb_run()
    emit(
        backend="duckdb",
        processes=1,
        runs=RUNS,
        seconds=round(elapsed, 2),
        runs_per_s=round(RUNS / elapsed),
    )


if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    sys.exit(main())
