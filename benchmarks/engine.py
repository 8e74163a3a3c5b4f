"""Engine benchmark: one command, JSON lines, ratios to DuckDB's own limits measured alongside.

    python benchmarks/engine.py                 # all workloads
    python benchmarks/engine.py W1 W5           # some of them
    python benchmarks/engine.py --postgres URL  # the service workloads on PostgreSQL too

W1  one run of 1,000 sequential trivial activities (durability="step", then "batched": W1B)
W2C 1,000 runs of 3 sequential trivial activities started at once
W3  one run fanning out 200 parallel trivial activities, then a join
W4  10,000 runs parked on a signal: start time, RSS per parked run, signal all, latency
W5  DuckDB alone on the same file system: checkpoint-shaped single commits, and 100 per transaction
S1  service mode (4 workers running): one caller thread calling engine.start() 1,000 times
S8  the same with 8 caller threads (starts/s, and end-to-end steps/s of the 3-step runs)
SIG signal -> run resumed and completed, one at a time (p50), then 8 threads signalling 1,000
    parked runs (signals/s)
ST  run.status of a live run while 8 callers start runs (p50)
HTTP `wfkit serve` subprocess, 32 clients POSTing /api/v1/runs for 10 s (wrk, else httpx)

Targets: W1 >= 0.85 x W5 single; W1B >= 5 x W1; W2C and W3 >= 0.3 x W5 batched; W4 <= 2 KiB RSS
per parked run; S1 >= 2,000 starts/s; S8 >= 5,000 starts/s and >= 5,000 steps/s; SIG p50 <= 3 ms
and >= 3,000 signals/s; ST p50 <= 50 us; HTTP >= 1,000 starts/s with p99 <= 50 ms. A caller that
waits for its own durable commit cannot start more runs per second than the store commits
transactions: S1 also prints its ratio to W5 single (that ceiling).
Nothing here asserts: it prints figures and ratios.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import os
import re
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

import wfkit as wf


@wf.activity("bench.noop")
def noop(ctx: wf.ActivityContext[dict]) -> None:
    return None


def rss_kib() -> int:
    """Current resident set size in KiB (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def emit(**fields: object) -> dict[str, object]:
    print(json.dumps(fields), flush=True)
    return fields


def fresh(tmp: Path, name: str) -> wf.Engine:
    path = tmp / f"{name}.duckdb"
    path.unlink(missing_ok=True)
    return wf.Engine(path)


def w5(tmp: Path) -> dict[str, object]:
    """DuckDB alone: the rows one checkpoint writes (one event row), single vs 100 per txn."""
    path = tmp / "w5.duckdb"
    path.unlink(missing_ok=True)
    wf.Engine(path).close()  # same schema as the engine uses
    con = duckdb.connect(str(path), config={"threads": 1})
    sql = (
        "INSERT INTO wf_events (run_id, seq, occurred_at, kind, node_id, token, attempt, "
        "started_at, actor, error, output, patch, delta, detail) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    delta = json.dumps({"s": {"tokens:t1": {"node": "n", "st": "ready", "att": 1}}, "d": []})
    now = datetime.now(UTC).replace(tzinfo=None)
    row = [
        "r",
        0,
        now,
        "step.completed",
        "bench.noop",
        "t1",
        1,
        now,
        None,
        None,
        None,
        None,
        delta,
        None,
    ]
    n = 2000
    t = time.perf_counter()
    for i in range(n):
        row[1] = i
        con.execute(sql, row)
    single = n / (time.perf_counter() - t)
    batches = 100
    batch_sql = (
        sql.rpartition("VALUES")[0] + "VALUES " + ", ".join(["(" + ", ".join("?" * 14) + ")"] * 100)
    )
    t = time.perf_counter()
    for b in range(batches):
        flat: list[object] = []
        for i in range(100):
            flat += [
                "r",
                b * 100 + i,
                now,
                "step.completed",
                "bench.noop",
                "t1",
                1,
                now,
                None,
                None,
                None,
                None,
                delta,
                None,
            ]
        con.execute("BEGIN")
        con.execute(batch_sql, flat)
        con.execute("COMMIT")
    values_rate = batches * 100 / (time.perf_counter() - t)
    # the same rows as one column-wise statement (lists bound as parameters)
    types = [
        "VARCHAR",
        "BIGINT",
        "TIMESTAMP",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
        "INTEGER",
        "TIMESTAMP",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
        "VARCHAR",
    ]
    columnar_sql = (
        sql.rpartition("VALUES")[0] + "SELECT " + ", ".join(f"unnest(?::{t}[])" for t in types)
    )
    t = time.perf_counter()
    for b in range(batches):
        columns = [
            ["r"] * 100,
            list(range(b * 100, b * 100 + 100)),
            [now] * 100,
            ["step.completed"] * 100,
            ["bench.noop"] * 100,
            ["t1"] * 100,
            [1] * 100,
            [now] * 100,
            [None] * 100,
            [None] * 100,
            [None] * 100,
            [None] * 100,
            [delta] * 100,
            [None] * 100,
        ]
        con.execute("BEGIN")
        con.execute(columnar_sql, columns)
        con.execute("COMMIT")
    columnar_rate = batches * 100 / (time.perf_counter() - t)
    batched = max(values_rate, columnar_rate)
    con.close()
    return emit(
        workload="W5",
        single_commits_per_s=round(single),
        batched_rows_per_s=round(batched),
        batched_values_rows_per_s=round(values_rate),
        batched_columnar_rows_per_s=round(columnar_rate),
    )


def w1(tmp: Path, steps: int = 1000, durability: str = "step") -> dict[str, object]:
    path = tmp / f"w1-{durability}.duckdb"
    path.unlink(missing_ok=True)
    eng = wf.Engine(path, durability=durability)
    flow = wf.Workflow("w1", 1).start_with("bench.noop")
    for _ in range(steps - 1):
        flow.then("bench.noop")
    eng.register(flow)
    t = time.perf_counter()
    run = eng.start("w1", {})
    eng.run_until_idle()
    elapsed = time.perf_counter() - t
    assert run.status == wf.RunStatus.COMPLETED, run.explain()
    # one checkpoint per step: the gaps between consecutive checkpoints are their latencies
    times = [
        r[0]
        for r in eng.sql(
            f"SELECT occurred_at FROM wf_events WHERE run_id = '{run.id}' "
            "AND kind = 'step.completed' ORDER BY seq"
        ).fetchall()
    ]
    gaps = [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(times)]
    q = statistics.quantiles(gaps, n=100)
    eng.close()
    return emit(
        workload="W1" if durability == "step" else "W1B",
        durability=durability,
        steps=steps,
        seconds=round(elapsed, 3),
        steps_per_s=round(steps / elapsed),
        ms_per_checkpoint=round(elapsed / steps * 1000, 3),
        checkpoint_p50_ms=round(q[49], 3),
        checkpoint_p99_ms=round(q[98], 3),
    )


def w2c(tmp: Path, runs: int = 1000, threads: int = 0) -> dict[str, object]:
    eng = fresh(tmp, "w2c")
    eng.register(
        wf.Workflow("w2c", 1).start_with("bench.noop").then("bench.noop").then("bench.noop")
    )
    t = time.perf_counter()
    handles = eng.start_many("w2c", [{} for _ in range(runs)])
    if threads:
        eng.start_workers(threads)
    eng.run_until_idle()
    elapsed = time.perf_counter() - t
    done = sum(1 for r in eng.runs(limit=runs * 2) if r.status == wf.RunStatus.COMPLETED)
    assert done == runs, done
    # from an attempt's start to the group checkpoint that records it
    lags = [
        (r[0] - r[1]).total_seconds() * 1000
        for r in eng.sql(
            "SELECT occurred_at, started_at FROM wf_events WHERE kind = 'step.completed'"
        ).fetchall()
    ]
    q = statistics.quantiles(lags, n=100)
    eng.close()
    del handles
    return emit(
        workload="W2C",
        runs=runs,
        threads=threads,
        seconds=round(elapsed, 3),
        runs_per_s=round(runs / elapsed),
        steps_per_s=round(runs * 3 / elapsed),
        step_to_checkpoint_p50_ms=round(q[49], 3),
        step_to_checkpoint_p99_ms=round(q[98], 3),
    )


def w3(tmp: Path, width: int = 200) -> dict[str, object]:
    eng = fresh(tmp, "w3")
    branches = {f"b{i}": (lambda b: b.then("bench.noop")) for i in range(width)}
    eng.register(wf.Workflow("w3", 1).start_with().parallel(**branches))
    t = time.perf_counter()
    run = eng.start("w3", {})
    eng.run_until_idle()
    elapsed = time.perf_counter() - t
    assert run.status == wf.RunStatus.COMPLETED, run.explain()
    eng.close()
    return emit(
        workload="W3", branches=width, seconds=round(elapsed, 3), steps_per_s=round(width / elapsed)
    )


def w4(tmp: Path, runs: int = 10_000) -> dict[str, object]:
    eng = fresh(tmp, "w4")
    eng.register(
        wf.Workflow("w4", 1).start_with().wait_for_signal("go", correlate="key").then("bench.noop")
    )
    gc.collect()
    before = rss_kib()
    t = time.perf_counter()
    for start in range(0, runs, 1000):
        eng.start_many("w4", [{"key": f"k{i}"} for i in range(start, start + 1000)])
    started = time.perf_counter() - t
    eng.run_until_idle()
    gc.collect()
    per_run = (rss_kib() - before) * 1024 / runs
    latencies = []
    t = time.perf_counter()
    for i in range(runs):
        s = time.perf_counter()
        assert eng.signal("go", f"k{i}")
        eng.run_until_idle()
        latencies.append((time.perf_counter() - s) * 1000)
    signalled = time.perf_counter() - t
    done = sum(1 for r in eng.runs(limit=runs * 2) if r.status == wf.RunStatus.COMPLETED)
    eng.close()
    q = statistics.quantiles(latencies, n=100)
    return emit(
        workload="W4",
        runs=runs,
        start_seconds=round(started, 2),
        rss_bytes_per_parked_run=round(per_run),
        signal_seconds=round(signalled, 2),
        completed=done,
        signal_to_resumed_p50_ms=round(q[49], 3),
        signal_to_resumed_p99_ms=round(q[98], 3),
    )


# --- service mode: workers running, callers on their own threads ------------------------------


def _three_steps(eng: wf.Engine) -> None:
    eng.register(
        wf.Workflow("svc", 1).start_with("bench.noop").then("bench.noop").then("bench.noop")
    )


def _parked(eng: wf.Engine) -> None:
    eng.register(
        wf.Workflow("svc_wait", 1)
        .start_with()
        .wait_for_signal("go", correlate="key")
        .then("bench.noop")
    )


_GATE = threading.Event()


@wf.activity("bench.hold")
def hold(ctx: wf.ActivityContext[dict]) -> None:
    _GATE.wait(60)


def _race(threads: list[threading.Thread], barrier: threading.Barrier) -> tuple[float, float]:
    """Start ``threads`` (each waits on ``barrier`` first), release them together, wait for
    them all: (the moment they were released, the seconds until the last one ended)."""
    for th in threads:
        th.start()
    barrier.wait()
    t = time.perf_counter()
    for th in threads:
        th.join()
    return t, time.perf_counter() - t


def s_starts(target: str, callers: int, runs: int = 1000, label: str = "") -> dict[str, object]:
    """``callers`` threads calling ``engine.start()`` once per run while 4 workers run."""
    eng = wf.Engine(target)
    _three_steps(eng)
    eng.start_workers(4)
    per = runs // callers
    latencies: list[float] = []
    barrier = threading.Barrier(callers + 1)

    def call() -> None:
        barrier.wait()
        mine = []
        for _ in range(per):
            s = time.perf_counter()
            eng.start("svc", {})
            mine.append((time.perf_counter() - s) * 1000)
        latencies.extend(mine)

    t, started = _race([threading.Thread(target=call) for _ in range(callers)], barrier)
    eng.run_until_idle()
    ended = time.perf_counter() - t
    done = eng.sql("SELECT count(*) FROM wf_instances WHERE status = 'completed'").fetchall()[0][0]
    eng.close()
    q = statistics.quantiles(latencies, n=100)
    return emit(
        workload=f"S{callers}{label}",
        callers=callers,
        runs=per * callers,
        completed=done,
        starts_per_s=round(per * callers / started),
        start_p50_ms=round(q[49], 3),
        start_p99_ms=round(q[98], 3),
        end_to_end_steps_per_s=round(per * callers * 3 / ended),
    )


def s_signals(target: str, runs: int = 1000, one: int = 300, label: str = "") -> dict[str, object]:
    """Signals with workers running: one at a time to the run's end (latency), then 8 threads
    signalling ``runs`` parked runs (throughput)."""
    eng = wf.Engine(target)
    _parked(eng)
    eng.start_workers(4)
    eng.start_many("svc_wait", [{"key": f"a{i}"} for i in range(one)])
    handles = {h.id: h for h in eng.start_many("svc_wait", [{"key": f"b{i}"} for i in range(runs)])}
    eng.run_until_idle()
    rows = eng.sql("SELECT run_id, data FROM wf_instances").fetchall()
    by_key = {json.loads(data)["key"]: run_id for run_id, data in rows}
    latencies = []
    for i in range(one):
        run = eng.run(by_key[f"a{i}"])
        s = time.perf_counter()
        assert eng.signal("go", f"a{i}")
        run.result(timeout=30)
        latencies.append((time.perf_counter() - s) * 1000)
    callers = 8
    barrier = threading.Barrier(callers + 1)
    lost: list[str] = []

    def send(part: int) -> None:
        barrier.wait()
        for i in range(part, runs, callers):
            if not eng.signal("go", f"b{i}"):
                lost.append(f"b{i}")

    _, sent = _race([threading.Thread(target=send, args=(p,)) for p in range(callers)], barrier)
    eng.run_until_idle()
    done = sum(1 for h in handles.values() if h.status == wf.RunStatus.COMPLETED)
    eng.close()
    q = statistics.quantiles(latencies, n=100)
    return emit(
        workload=f"SIG{label}",
        one_at_a_time=one,
        signal_to_completed_p50_ms=round(q[49], 3),
        signal_to_completed_p99_ms=round(q[98], 3),
        signalled=runs,
        not_taken=len(lost),
        completed=done,
        signals_per_s_8_threads=round(runs / sent),
    )


def s_status(target: str, reads: int = 20_000, label: str = "") -> dict[str, object]:
    """``run.status`` of a live run (its step is running) while 8 callers start runs and 4
    workers run them (reads must not queue behind commits)."""
    eng = wf.Engine(target)
    _three_steps(eng)
    gate = _GATE
    gate.clear()
    eng.register(wf.Workflow("svc_hold", 1).start_with("bench.hold"))
    eng.start_workers(4)
    run = eng.start("svc_hold", {})
    deadline = time.monotonic() + 10
    while "running" not in run.explain() and time.monotonic() < deadline:
        time.sleep(0.01)
    busy = threading.Event()

    def load() -> None:
        while not busy.is_set():
            eng.start("svc", {})

    loaders = [threading.Thread(target=load) for _ in range(8)]
    for th in loaders:
        th.start()
    samples = []
    for _ in range(reads):
        s = time.perf_counter_ns()
        _ = run.status
        samples.append((time.perf_counter_ns() - s) / 1000)
        time.sleep(0)  # let the callers run between reads
    data = []
    for _ in range(reads // 10):
        s = time.perf_counter_ns()
        _ = run.data
        data.append((time.perf_counter_ns() - s) / 1000)
    busy.set()
    for th in loaders:
        th.join()
    gate.set()
    eng.run_until_idle()
    eng.close()
    q = statistics.quantiles(samples, n=100)
    qd = statistics.quantiles(data, n=100)
    return emit(
        workload=f"ST{label}",
        reads=reads,
        status_p50_us=round(q[49], 1),
        status_p99_us=round(q[98], 1),
        data_p50_us=round(qd[49], 1),
    )


@contextlib.contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A fresh PostgreSQL database on the server of ``admin_url``, dropped afterwards."""
    import psycopg

    name = f"wfkit_bench_{secrets.token_hex(6)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = admin_url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def service(
    target: Callable[[str], contextlib.AbstractContextManager[str]], label: str, wanted: set[str]
) -> dict[str, dict[str, object]]:
    """The service-mode workloads, each on a fresh database made by ``target(name)``."""
    results: dict[str, dict[str, object]] = {}
    if "S1" in wanted:
        with target("s1") as where:
            results["S1"] = s_starts(where, 1, label=label)
    if "S8" in wanted:
        with target("s8") as where:
            results["S8"] = s_starts(where, 8, label=label)
    if "SIG" in wanted:
        with target("sig") as where:
            results["SIG"] = s_signals(where, label=label)
    if "ST" in wanted:
        with target("st") as where:
            results["ST"] = s_status(where, label=label)
    return results


# --- service mode over HTTP: `wfkit serve` in its own process, clients POSTing starts --------

_HTTP_FLOWS = '''"""Workflows served by the HTTP benchmark (imported by `wfkit serve --module`)."""

import wfkit as wf


@wf.activity("bench.noop")
def noop(ctx: wf.ActivityContext[dict]) -> None:
    return None


svc = wf.Workflow("svc", 1).start_with("bench.noop").then("bench.noop").then("bench.noop")
'''

_WRK_SCRIPT = """wrk.method = "POST"
wrk.body = '{"workflow": "svc", "data": {}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %s"
"""

_WRK_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


def _wfkit_command() -> list[str]:
    """``wfkit`` of this interpreter's environment, or the same CLI through ``-c``."""
    script = Path(sys.executable).with_name("wfkit")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from wfkit.cli import main; main()"]


def _wait_for_sidecar(sidecar: Path, server: subprocess.Popen[bytes], log: Path) -> str:
    """The server's URL once it listens (its sidecar file), within 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(
                f"wfkit serve exited with {server.returncode}: {log.read_text()[-2000:]}"
            )
        try:
            return str(json.loads(sidecar.read_text(encoding="utf-8"))["url"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.05)
    raise RuntimeError(
        f"wfkit serve wrote no {sidecar.name} within 30 s: {log.read_text()[-2000:]}"
    )


def _stop_server(server: subprocess.Popen[bytes]) -> int:
    """SIGINT (the server removes its sidecar file and closes the database), SIGKILL after 15 s."""
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return server.returncode


def _wrk_ms(text: str) -> float:
    number = re.fullmatch(r"([\d.]+)([a-z]+)", text)
    if number is None:
        raise ValueError(f"not a wrk duration: {text!r}")
    return float(number[1]) * _WRK_UNITS[number[2]]


def _wrk(wrk: str, url: str, script: Path, clients: int, seconds: int) -> dict[str, Any]:
    """One wrk run: requests, seconds, non-2xx, socket errors, p50/p99 (ms)."""
    options = ["-t2", f"-c{clients}", f"-d{seconds}s", "--timeout", "10s", "--latency"]
    out = subprocess.run(
        [wrk, *options, "-s", str(script), url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
        check=True,
    ).stdout
    done = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)\b", out)
    if done is None:
        raise RuntimeError(f"cannot read wrk's output:\n{out}")
    percentiles = dict(re.findall(r"^\s+(\d+)%\s+(\S+)$", out, re.MULTILINE))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {
        "requests": int(done[1]),
        "seconds": _wrk_ms(done[2] + done[3]) / 1000,
        "non_2xx": int(non_2xx[1]) if non_2xx else 0,
        "socket_errors": sum(int(n) for n in errors.groups()) if errors else 0,
        "p50_ms": _wrk_ms(percentiles["50"]) if "50" in percentiles else None,
        "p99_ms": _wrk_ms(percentiles["99"]) if "99" in percentiles else None,
    }


def _httpx_load(
    url: str, token: str, clients: int, seconds: float, warm_up: float
) -> dict[str, Any]:
    """``clients`` tasks on one httpx AsyncClient; requests started during the warm-up are
    not counted."""
    import asyncio

    import httpx

    async def load() -> dict[str, Any]:
        latencies: list[float] = []
        outcome = {"requests": 0, "non_2xx": 0, "socket_errors": 0, "warm_up": 0}
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        headers = {"Authorization": f"Bearer {token}"}
        body = {"workflow": "svc", "data": {}}
        begin = time.perf_counter()
        counted_from = begin + warm_up
        end = counted_from + seconds
        last = counted_from
        async with httpx.AsyncClient(limits=limits, timeout=10, headers=headers) as client:

            async def one_client() -> None:
                nonlocal last
                while (s := time.perf_counter()) < end:
                    counted = s >= counted_from
                    try:
                        response = await client.post(f"{url}/api/v1/runs", json=body)
                    except httpx.HTTPError:
                        if counted:
                            outcome["socket_errors"] += 1
                        continue
                    finished = time.perf_counter()
                    if not counted:
                        outcome["warm_up"] += 1
                        continue
                    outcome["requests"] += 1
                    last = max(last, finished)
                    latencies.append((finished - s) * 1000)
                    if not 200 <= response.status_code < 300:
                        outcome["non_2xx"] += 1

            await asyncio.gather(*(one_client() for _ in range(clients)))
        q = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else None
        return {
            **outcome,
            "seconds": max(end, last) - counted_from,
            "p50_ms": q[49] if q else None,
            "p99_ms": q[98] if q else None,
        }

    return asyncio.run(load())


def http(tmp: Path, clients: int = 32, seconds: int = 10, threads: int = 4) -> dict[str, object]:
    """``wfkit serve`` in its own process; ``clients`` connections POST /api/v1/runs (a run of
    3 trivial steps each) for ``seconds`` after a 1 s warm-up, with wrk or else httpx."""
    from wfkit.api.server import sidecar_path  # where the server says its URL once it listens

    folder = tmp / "http"
    folder.mkdir(exist_ok=True)
    flows = folder / "bench_http_flows.py"
    flows.write_text(_HTTP_FLOWS, encoding="utf-8")
    db = folder / "http.duckdb"
    log = folder / "server.log"
    token = secrets.token_hex(16)  # 32 characters
    env = dict(os.environ, WFKIT_API_TOKEN=token)
    here = str(Path(wf.__file__).resolve().parents[1])  # serve this very wfkit
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    command = [*_wfkit_command(), "serve", "--db", str(db), "--port", "0"]
    command += ["--module", str(flows), "--threads", str(threads), "--no-access-log"]
    wrk = shutil.which("wrk")
    with open(log, "wb") as out:
        server = subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=out)
    try:
        url = _wait_for_sidecar(sidecar_path(db), server, log)
        with urllib.request.urlopen(f"{url}/api/v1/health", timeout=10) as health:
            assert health.status == 200, health.status
        load: dict[str, Any]
        if wrk:
            script = folder / "start.lua"
            script.write_text(_WRK_SCRIPT % token, encoding="utf-8")
            target = f"{url}/api/v1/runs"
            warm_up = _wrk(wrk, target, script, clients, 1)["requests"]
            load = _wrk(wrk, target, script, clients, seconds)
            load["warm_up"] = warm_up
        else:
            load = _httpx_load(url, token, clients, seconds, warm_up=1)
    finally:
        exit_code = _stop_server(server)
    eng = wf.Engine(db)
    statuses = dict(eng.sql("SELECT status, count(*) FROM wf_instances GROUP BY 1").fetchall())
    eng.close()
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    problems = [line for line in lines if "ERROR" in line or "Traceback" in line]
    for line in problems[:5]:
        print(f"HTTP server log: {line}", file=sys.stderr, flush=True)
    took = float(load["seconds"])
    requests = int(load["requests"])
    ok = requests - int(load["non_2xx"])
    p50, p99 = load["p50_ms"], load["p99_ms"]
    return emit(
        workload="HTTP",
        generator="wrk" if wrk else "httpx",
        clients=clients,
        server_threads=threads,
        seconds=round(took, 3),
        requests=requests,
        non_2xx=load["non_2xx"],
        socket_errors=load["socket_errors"],
        warm_up_requests=load["warm_up"],
        starts_per_s=round(ok / took),
        p50_ms=None if p50 is None else round(float(p50), 3),
        p99_ms=None if p99 is None else round(float(p99), 3),
        runs_in_db=sum(statuses.values()),
        runs_completed=statuses.get("completed", 0),
        runs_by_status=statuses,
        server_exit=exit_code,
        server_log_errors=len(problems),
    )


def main(argv: list[str]) -> None:
    postgres = None
    if "--postgres" in argv:
        at = argv.index("--postgres")
        postgres = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    everything = {"W1", "W2C", "W3", "W4", "W5", "S1", "S8", "SIG", "ST", "HTTP"}
    wanted = set(argv) or everything
    with tempfile.TemporaryDirectory(prefix="wfkit-bench-") as folder:
        tmp = Path(folder)

        @contextlib.contextmanager
        def duckdb_file(name: str) -> Iterator[str]:
            path = tmp / f"{name}.duckdb"
            path.unlink(missing_ok=True)
            yield str(path)

        limits = w5(tmp)
        results = {}
        if "W1" in wanted:
            results["W1"] = w1(tmp)
            results["W1B"] = w1(tmp, durability="batched")
        if "W2C" in wanted:
            results["W2C"] = w2c(tmp)
        if "W3" in wanted:
            results["W3"] = w3(tmp)
        if "W4" in wanted:
            results["W4"] = w4(tmp)
        results.update(service(duckdb_file, "", wanted))
        if "HTTP" in wanted:
            results["HTTP"] = http(tmp)
        if postgres:
            service(lambda name: postgres_database(postgres), "_postgres", wanted)
    single, batched = limits["single_commits_per_s"], limits["batched_rows_per_s"]
    checks: list[tuple[str, float, float, float | None]] = []  # name, value, target, base
    if "W1" in results:
        checks.append(("W1_vs_W5_single", results["W1"]["steps_per_s"], 0.85, single))
        checks.append(
            ("W1B_vs_W1", results["W1B"]["steps_per_s"], 5.0, results["W1"]["steps_per_s"])
        )
    if "W2C" in results:
        checks.append(("W2C_vs_W5_batched", results["W2C"]["steps_per_s"], 0.3, batched))
    if "W3" in results:
        checks.append(("W3_vs_W5_batched", results["W3"]["steps_per_s"], 0.3, batched))
    if "S1" in results:
        checks.append(("S1_starts_per_s", results["S1"]["starts_per_s"], 2000, None))
        checks.append(("S1_vs_W5_single", results["S1"]["starts_per_s"], 1.0, single))
    if "S8" in results:
        checks.append(("S8_starts_per_s", results["S8"]["starts_per_s"], 5000, None))
        checks.append(("S8_steps_per_s", results["S8"]["end_to_end_steps_per_s"], 5000, None))
    if "SIG" in results:
        checks.append(("SIG_signals_per_s", results["SIG"]["signals_per_s_8_threads"], 3000, None))
    for name, value, target, base in checks:
        ratio = float(value) / float(base) if base else float(value) / target
        met = ratio >= target if base else ratio >= 1
        emit(check=name, value=value, ratio=round(ratio, 3), target=target, met=met)
    lows: list[tuple[str, object, float]] = []  # at most this
    if "SIG" in results:
        lows.append(("SIG_p50_ms", results["SIG"]["signal_to_completed_p50_ms"], 3.0))
    if "ST" in results:
        lows.append(("ST_status_p50_us", results["ST"]["status_p50_us"], 50.0))
    if "W4" in results:
        lows.append(("W4_rss_per_parked_run", results["W4"]["rss_bytes_per_parked_run"], 2048))
    if "HTTP" in results:
        rate = results["HTTP"]["starts_per_s"]
        emit(
            check="HTTP_starts_per_s",
            value=rate,
            ratio=round(float(rate) / 1000, 3),  # type: ignore[arg-type]
            target=1000,
            met=float(rate) >= 1000,  # type: ignore[arg-type]
        )
        lows.append(("HTTP_p99_ms", results["HTTP"]["p99_ms"], 50.0))
    for name, value, limit in lows:
        met = value is not None and float(value) <= limit  # type: ignore[arg-type]
        emit(check=name, value=value, target=limit, met=met)
    emit(peak_rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))


if __name__ == "__main__":
    main(sys.argv[1:])
