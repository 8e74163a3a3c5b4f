"""Crash safety: SIGKILL an engine process at random moments, relaunch it, and check the run.

DESIGN.md, "The decision that shapes everything": a checkpoint is one store transaction, so a
crash re-runs at most the activity in flight (at-least-once), never the whole graph. Here a child
process (``crash_child.py``) drives one long run — 120 sequential steps with a 3-branch parallel
fan-out and join after every 10th — on a DuckDB file; the parent kills it with SIGKILL several
times, relaunches it each time, lets the last launch finish, then reopens the file and checks:

* the run completed, its data document has every step, and every step has exactly one
  ``step.completed`` event (a killed attempt never reached its checkpoint);
* every step ran at least once, none more than kills + 1 times;
* the output recorded for each step came from the LAST execution of that step (nothing ran a
  step again once its checkpoint was durable);
* what one kill made run again is the work that was in flight — see ``_in_flight_bound``.
"""

from __future__ import annotations

import importlib.util
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

import wfkit as wf
from tests.scale import count

CHILD = Path(__file__).with_name("crash_child.py")
# the first kill lands around start-up (import, migrations, start); the others mid-run
KILLS = count(6, 3)
STARTUP_DELAY = (0.3, 0.6)  # seconds after launch (importing wfkit alone takes ~0.4 s)
RUN_DELAY = (0.05, 0.4)  # seconds after the launch's first activity line
LAUNCH_TIMEOUT = 30.0  # seconds for the last launch to finish the run


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_child_for_test", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


@dataclass
class Launch:
    pid: int
    returncode: int
    killed_at: float | None  # seconds the parent waited before sending SIGKILL, if it did


@dataclass
class Line:
    node: str
    attempt: int
    pid: int


def _tail(path: Path, size: int = 4000) -> str:
    text = path.read_text(errors="replace") if path.exists() else "(no child output)"
    return "\n--- child output (tail) ---\n" + text[-size:]


def _log_lines(path: Path) -> list[Line]:
    if not path.exists():
        return []
    text = path.read_text()
    lines = []
    for raw in text.splitlines(keepends=True):
        assert raw.endswith("\n"), f"torn log line {raw!r}: the activity log is fsynced per line"
        node, attempt, pid = raw.split()
        lines.append(Line(node, int(attempt), int(pid)))
    return lines


def _has_line_from(path: Path, pid: int) -> bool:
    return any(line.pid == pid for line in _log_lines(path))


def _in_flight_bound(lost: set[str]) -> bool:
    """True when ``lost`` fits inside one stage of the graph: the most one kill may re-run.

    A step's successor is dispatched only after the step's checkpoint is durable, so at any moment
    the steps started but not yet checkpointed ("in flight") lie in ONE stage: one sequential step,
    or some of the 3 branches of one fan-out (inline mode runs the 3 branches as one batch and
    commits them together; with 2 workers, 2 branches run while a finished one may wait for the
    group commit). So one kill re-runs at most 1 step on the sequential path and at most 3 in a
    fan-out: never anything that was already checkpointed, never more than one stage.
    """
    return any(lost <= stage for stage in child.STAGES)


def _batched_bound(lost: set[str]) -> bool:
    """True when ``lost`` fits inside two consecutive stages: with ``durability="batched"`` a
    step's checkpoint may wait up to the 5 ms window while its successor runs, and every step
    here sleeps at least 5 ms, so a kill loses at most the stage written last plus the stage
    in flight."""
    stages = child.STAGES
    return any(lost <= stages[i] | stages[i + 1] for i in range(len(stages) - 1))


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "seed"), [("inline", 1), ("workers", 2), ("batched", 3)])
@pytest.mark.duckdb_only  # a restarted engine on PostgreSQL waits for the dead lease
def test_random_sigkills_rerun_only_the_steps_in_flight(
    mode: str, seed: int, db_path: Path, tmp_path: Path, open_engine
) -> None:
    rng = random.Random(seed)
    log_path = tmp_path / "activities.log"
    out_path = tmp_path / "child.out"
    launches: list[Launch] = []
    live: list[subprocess.Popen[bytes]] = []

    def launch() -> subprocess.Popen[bytes]:
        with out_path.open("ab") as out:
            out.write(f"=== launch {len(launches) + 1} ({mode}) ===\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [sys.executable, str(CHILD), str(db_path), str(log_path), mode],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        live.append(proc)
        return proc

    try:
        for k in range(KILLS):
            proc = launch()
            started = time.monotonic()
            if k == 0:
                delay = rng.uniform(*STARTUP_DELAY)
            else:
                delay = rng.uniform(*RUN_DELAY)
                # wait until this launch is driving steps (or has already exited)
                while proc.poll() is None and not _has_line_from(log_path, proc.pid):
                    assert time.monotonic() - started < LAUNCH_TIMEOUT, (
                        f"launch {k + 1} ran no step in {LAUNCH_TIMEOUT}s" + _tail(out_path)
                    )
                    time.sleep(0.005)
                started = time.monotonic()
            time.sleep(max(0.0, delay - (time.monotonic() - started)))
            # a child that already finished is a zombie until waited for: the kill is a no-op
            os.kill(proc.pid, signal.SIGKILL)
            returncode = proc.wait(timeout=LAUNCH_TIMEOUT)
            assert returncode in (0, -signal.SIGKILL), (
                f"launch {k + 1} exited {returncode} on its own: the child broke" + _tail(out_path)
            )
            launches.append(Launch(proc.pid, returncode, delay))

        proc = launch()
        try:
            returncode = proc.wait(timeout=LAUNCH_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the last launch did not finish in {LAUNCH_TIMEOUT}s" + _tail(out_path))
        assert returncode == 0, f"the last launch exited {returncode}" + _tail(out_path)
        launches.append(Launch(proc.pid, returncode, None))
    finally:
        for p in live:
            if p.poll() is None:
                p.kill()
                p.wait()

    tail = _tail(out_path)
    kills = sum(1 for x in launches if x.returncode == -signal.SIGKILL)
    assert kills >= KILLS - 1, (
        f"only {kills} of {KILLS} kills landed before the run finished; the workflow is too "
        f"short for the kill delays: {launches}" + tail
    )

    # --- the store: reopen the file in this process -------------------------------------------
    engine = open_engine(registry=child.make_registry(log_path), clock=None)
    engine.register(child.make_flow())  # the same graph: a no-op, nothing in flight changed
    infos = engine.runs()
    assert len(infos) == 1, f"expected exactly one run, found {infos}" + tail
    run = engine.run(infos[0].run_id)
    assert run.status == wf.RunStatus.COMPLETED, run.explain() + tail
    assert run.data == {"done": dict.fromkeys(child.NODES, True)}, tail

    history = run.history()
    assert [e.seq for e in history] == list(range(1, len(history) + 1)), "gaps in the event log"
    kinds = Counter(e.kind for e in history)
    assert kinds["run.started"] == 1 and kinds["run.completed"] == 1, kinds
    assert kinds["step.failed"] == 0, [str(e) for e in history if e.kind == "step.failed"]
    completed = Counter(e.node_id for e in history if e.kind == "step.completed")
    assert completed == Counter(child.NODES), (
        "every step must have exactly one step.completed event: "
        f"{ {n: c for n, c in completed.items() if c != 1} } "
        f"missing {sorted(set(child.NODES) - set(completed))}"
    )
    rows = engine.sql(
        "SELECT node_id, count(*) FROM wf_events WHERE kind = 'step.completed' GROUP BY node_id"
    ).fetchall()
    assert dict(rows) == dict.fromkeys(child.NODES, 1)

    # --- the activity log: what ran, where ----------------------------------------------------
    lines = _log_lines(log_path)
    runs_of = Counter(line.node for line in lines)
    assert set(runs_of) == set(child.NODES), f"never ran: {set(child.NODES) - set(runs_of)}"
    too_often = {n: c for n, c in runs_of.items() if c > kills + 1}
    assert not too_often, f"ran more than kills + 1 = {kills + 1} times: {too_often}"
    twice_in_one_process = Counter((x.node, x.pid) for x in lines) - Counter(
        {(x.node, x.pid): 1 for x in lines}
    )
    assert not twice_in_one_process, f"a process ran a step twice: {twice_in_one_process}"

    last: dict[str, Line] = {}
    for line in lines:
        last[line.node] = line
    outputs = run.outputs
    not_last = {
        n: (outputs[n], last[n])
        for n in child.NODES
        if (outputs[n]["pid"], outputs[n]["attempt"]) != (last[n].pid, last[n].attempt)
    }
    assert not not_last, f"a step ran again after its checkpoint was durable: {not_last}"

    # Bound: each kill re-runs at most the steps in flight when it landed — one stage of the
    # graph (1 sequential step, or up to the 3 branches of one fan-out); so the total number of
    # extra executions is at most 3 per kill, and at most 1 per kill that hit the sequential path.
    # The last launch was not killed: it loses nothing. Launches that ended on their own neither.
    lost_by_launch = {
        x.pid: {ln.node for ln in lines if ln.pid == x.pid and outputs[ln.node]["pid"] != x.pid}
        for x in launches
    }
    for x in launches:
        lost = lost_by_launch[x.pid]
        if x.returncode == 0:
            assert not lost, f"launch {x.pid} exited normally but its steps ran again: {lost}"
        else:
            bound = _batched_bound if mode == "batched" else _in_flight_bound
            assert bound(lost), (
                f"one kill (pid {x.pid}) re-ran more than the steps in flight: {sorted(lost)}"
            )
    extra = len(lines) - len(child.NODES)
    assert extra == sum(len(lost) for lost in lost_by_launch.values())
    widest = max(len(stage) for stage in child.STAGES) * (2 if mode == "batched" else 1)
    assert extra <= kills * widest, f"{extra} extra executions for {kills} kills"

    in_fan_out = sum(1 for lost in lost_by_launch.values() if len(lost) > 1)
    print(
        f"\n{mode}: {kills} kills landed, {extra} extra executions "
        f"({in_fan_out} kills re-ran several fan-out branches); "
        f"re-runs per launch: {[sorted(v) for v in lost_by_launch.values()]}; "
        f"delays: {[round(x.killed_at, 3) for x in launches if x.killed_at is not None]}"
    )
