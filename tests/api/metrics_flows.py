"""Activities and workflows of the metrics and JSON-log tests; the servers and workers import
this file.

``m-wait`` runs ``mtest.work`` (which logs a line through ``ctx.logger``) and then waits for
signal ``go``; ``m-fail`` runs ``mtest.boom``, which always raises: one attempt, then the run
fails.
"""

from __future__ import annotations

from typing import Any

import wfkit as wf


@wf.activity("mtest.work")
def work(ctx: wf.ActivityContext[Any]) -> dict[str, int]:
    """Log a line through the attempt's logger, then return."""
    ctx.logger.info("working on it")
    return {"done": 1}


@wf.activity("mtest.boom")
def boom(ctx: wf.ActivityContext[Any]) -> None:
    """Always fail."""
    raise RuntimeError("boom, as the test asks")


waiting = wf.Workflow("m-wait", version=1).start_with("mtest.work").wait_for_signal("go")
failing = wf.Workflow("m-fail", version=1).start_with("mtest.boom", max_attempts=1)
