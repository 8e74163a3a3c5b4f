"""Child process for ``test_exit.py``: start workers on many runs, then end the script at once.

Usage: ``python exit_child.py TARGET {end|raise|exit}``

The script starts 400 runs of three quick steps, starts 4 workers, and while they run falls off
its end (``end``), raises ``RuntimeError("boom")`` (``raise``) or calls ``sys.exit(7)``
(``exit``), without stopping or closing the engine: the engine's exit hook does that.
"""

from __future__ import annotations

import sys
import time

import wfkit as wf

RUNS = 400
STEPS = ("ex.a", "ex.b", "ex.c")


def make_registry() -> wf.ActivityRegistry:
    """Three activities that return at once."""
    registry = wf.ActivityRegistry()
    for name in STEPS:
        registry.register(name, lambda ctx: None)
    return registry


def make_flow() -> wf.Workflow:
    """``ex.a`` then ``ex.b`` then ``ex.c``."""
    return wf.Workflow("ex.flow").start_with(STEPS[0]).then(STEPS[1]).then(STEPS[2])


def main(target: str, how: str) -> None:
    engine = wf.Engine(target, registry=make_registry())
    engine.register(make_flow())
    engine.start_many("ex.flow", [{}] * RUNS)
    engine.start_workers(4)
    time.sleep(0.2)
    print("ending", flush=True)
    if how == "raise":
        raise RuntimeError("boom")
    if how == "exit":
        sys.exit(7)


if __name__ == "__main__":
    main(*sys.argv[1:])
