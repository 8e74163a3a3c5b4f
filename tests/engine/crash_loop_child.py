"""Child process for ``test_crash_loop.py``: drive one run whose activities kill the process.

Usage: ``python crash_loop_child.py TARGET LOG_PATH {inline|workers} {loop|each|failed}``

TARGET is a DuckDB file or a PostgreSQL URL (then the engine takes a 1 s lease, so that the next
launch claims the run of a dead one quickly). The first launch starts the run; every later launch
only reopens the store and keeps driving it. Every activity appends ``"<node> <item> <attempt>
<pid>"`` to LOG_PATH (fsynced) before it does anything else.

Scenarios:

* ``loop``: ``cl.boom`` (max_attempts=3, no retry delay) kills its process on every attempt
  (``os._exit(1)``); the run must fail for good.
* ``failed``: the same with max_attempts=2 and a retry delay (a retry timer between crashes), and
  a ``failed`` outlet into ``cl.cleanup``: the run completes through it.
* ``each``: a for_each over 12 items of ``cl.each``; items 2, 5 and 8 each kill the process
  (SIGKILL) the first time they run, every other item sleeps briefly and returns.

Exit codes: 0 when the run ended (completed or failed); 3 when it is still going; a process the
activity killed exits 1 or -9.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import wfkit as wf

KILLERS = (2, 5, 8)
ITEMS = list(range(12))


def make_registry(log_path: str | Path) -> wf.ActivityRegistry:
    """The activities of every scenario, logging each call."""
    registry = wf.ActivityRegistry()
    log_path = Path(log_path)

    def note(ctx: wf.ActivityContext[Any]) -> None:
        with log_path.open("a", encoding="utf-8") as log:
            log.write(f"{ctx.node_id} {ctx.item} {ctx.attempt} {os.getpid()}\n")
            log.flush()
            os.fsync(log.fileno())

    def boom(ctx: wf.ActivityContext[Any]) -> None:
        note(ctx)
        os._exit(1)

    def quiet(ctx: wf.ActivityContext[Any]) -> None:
        note(ctx)

    def each(ctx: wf.ActivityContext[Any]) -> int:
        note(ctx)
        flag = log_path.with_name(f"killed-{ctx.item}")
        if ctx.item in KILLERS and not flag.exists():
            flag.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.05)
        return int(ctx.item)

    registry.register("cl.boom", boom)
    registry.register("cl.after", quiet)
    registry.register("cl.cleanup", quiet)
    registry.register("cl.each", each)
    return registry


def make_flow(scenario: str) -> wf.Workflow:
    """The workflow of ``scenario`` (id ``cl.<scenario>``)."""
    flow = wf.Workflow(f"cl.{scenario}", version=1)
    if scenario == "loop":
        return flow.start_with("cl.boom", max_attempts=3, retry_delay="0s").then("cl.after")
    if scenario == "failed":
        return (
            flow.start_with("cl.boom", max_attempts=2, retry_delay="0.2s")
            .on_failed(lambda b: b.then("cl.cleanup"))
            .then("cl.after")
        )
    if scenario == "each":
        return flow.start_with("cl.after").for_each(
            "items", lambda b: b.then("cl.each", retry_delay="0.1s")
        )
    raise ValueError(f"unknown scenario {scenario!r}")


def open_engine(target: str, log_path: str | Path) -> wf.Engine:
    """The engine every launch (and the test, afterwards) opens on ``target``."""
    lease = "1s" if target.startswith("postgresql") else "30s"
    return wf.Engine(target, registry=make_registry(log_path), lease=lease)


def main(target: str, log_path: str, mode: str, scenario: str) -> int:
    engine = open_engine(target, log_path)
    try:
        engine.register(make_flow(scenario))
        infos = engine.runs()
        if infos:
            run = engine.run(infos[0].run_id)
        else:
            run = engine.start(f"cl.{scenario}", {"items": ITEMS})
        if mode == "workers":
            engine.start_workers(2)
        try:
            run.result(timeout=30)
        except wf.WorkflowFailed:
            pass
        except TimeoutError as exc:
            print(f"run {run.id} did not end: {exc}", file=sys.stderr)
        engine.stop()
        status = run.status
        print(f"pid {os.getpid()}: run {run.id} is {status.value}", flush=True)
        return 0 if status.terminal else 3
    finally:
        engine.close()


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
