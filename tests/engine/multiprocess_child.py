"""Activities, workflows and a signal sender for ``test_multiprocess.py``.

Worker processes import this file with ``wfkit worker --module <this file>``: with
``WFKIT_MP_LOG`` set (a folder) its activities register themselves in ``wf.default_registry``
and each appends ``"<node> <run_id> <pid>"`` to ``<folder>/acts-<pid>.log`` *before* it sleeps
``WFKIT_MP_SLEEP`` seconds and returns, so an attempt cut short by SIGKILL still shows up as a
line. The file is opened with ``O_APPEND`` and written with one ``os.write`` per line, which a
killed process never tears (no user-space buffer).

The module-level workflows are what ``wfkit worker`` registers:

* ``mp.order`` — prepare, a 3-branch parallel (``mp.a``/``mp.b``/``mp.c``) and its join, a wait
  for signal ``go`` correlated on ``key`` (binding ``by``), a saga around ``mp.reserve``
  (compensated by ``mp.release``; the happy path never calls it), then ``mp.finish``;
* ``mp.gate`` — a wait for signal ``open`` correlated on ``key`` whose payload is collected
  by the binder ``mp.collect`` (so a second delivery would show as a second item), then
  ``mp.after``.

``python multiprocess_child.py send URL NAME KEY THREADS GO_FILE`` opens its own engine on URL,
prints ``ready``, waits until GO_FILE exists, and has THREADS threads call ``engine.signal`` at
once; it prints ``delivered <n> of <THREADS>, <e> errors`` and exits 0 (1 when a call raised).

Importing the module without ``WFKIT_MP_LOG`` has no side effects (pytest imports it for its
doctests). It is not named ``test_*`` so pytest does not collect it as a test.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import wfkit as wf

LOG_ENV = "WFKIT_MP_LOG"
SLEEP_ENV = "WFKIT_MP_SLEEP"

BRANCHES = ("mp.a", "mp.b", "mp.c")
ORDER_ACTIVITIES = ("mp.prepare", *BRANCHES, "mp.reserve", "mp.finish")
"""The activities every happy ``mp.order`` run calls exactly once (node id == activity name)."""
GATE_ACTIVITIES = ("mp.after",)
ACTIVITIES = (*ORDER_ACTIVITIES, *GATE_ACTIVITIES, "mp.release")


def make_order_flow() -> wf.Workflow:
    """prepare -> parallel(a, b, c) + join -> wait 'go' -> saga[reserve ~ release] -> finish."""
    return (
        wf.Workflow("mp.order", 1)
        .start_with("mp.prepare")
        .parallel(*[(lambda b, n=n: b.then(n)) for n in BRANCHES])
        .wait_for_signal("go", correlate="key", bind={"by": "approved_by"}, id="go")
        .saga(lambda s: s.then("mp.reserve").compensate_with("mp.release"), id="order")
        .then("mp.finish")
    )


def make_gate_flow() -> wf.Workflow:
    """wait 'open' (key) -> after; the payload goes through the binder ``mp.collect``."""
    return (
        wf.Workflow("mp.gate", 1)
        .start_with()
        .wait_for_signal("open", correlate="key", bind="mp.collect", id="open")
        .then("mp.after")
    )


ORDER = make_order_flow()
GATE = make_gate_flow()


def work(ctx: wf.ActivityContext[dict[str, Any]]) -> dict[str, Any]:
    """Log the attempt (before anything else), sleep a little, mark the step done."""
    pid = os.getpid()
    line = f"{ctx.node_id} {ctx.instance_id} {pid}\n".encode()
    fd = os.open(
        Path(os.environ[LOG_ENV]) / f"acts-{pid}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT
    )
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    time.sleep(float(os.environ.get(SLEEP_ENV, "0")))
    ctx.data.setdefault("done", {})[ctx.node_id] = True  # a key per node: re-runs cannot add
    return {"pid": pid}


def collect(data: dict[str, Any], payload: dict[str, Any]) -> None:
    """Binder: every payload delivered to the gate's wait is appended to ``data['got']``."""
    data.setdefault("got", []).append(payload)


def register(registry: wf.ActivityRegistry) -> wf.ActivityRegistry:
    """Register every activity and the binder into ``registry``."""
    for name in ACTIVITIES:
        registry.register(name, work)
    registry.register("mp.collect", collect)
    return registry


if os.environ.get(LOG_ENV):  # a worker process: the engine looks activities up here
    register(wf.default_registry)


def send(url: str, name: str, key: str, threads: int, go_file: str) -> int:
    """Signal (name, key) from ``threads`` threads at once through this process's own engine."""
    engine = wf.Engine(url, registry=register(wf.ActivityRegistry()), lease="3s")
    answers: list[bool] = []
    errors: list[str] = []
    barrier = threading.Barrier(threads)

    def one(i: int) -> None:
        try:
            barrier.wait(30)
            ok = engine.signal(name, key, {"sender": f"{os.getpid()}-{i}"}, actor=f"p{i}")
            answers.append(ok)
        except BaseException:
            errors.append(traceback.format_exc())

    try:
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(go_file) and time.monotonic() < deadline:
            time.sleep(0.005)
        pool = [threading.Thread(target=one, args=(i,)) for i in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join(60)
    finally:
        engine.close()
    for error in errors:
        print(error, file=sys.stderr, flush=True)
    print(f"delivered {sum(answers)} of {threads}, {len(errors)} errors", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    if len(sys.argv) != 7 or sys.argv[1] != "send":
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(send(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]))
