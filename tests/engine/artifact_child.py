"""What ``test_artifacts.py`` runs in another process: an attempt shipped as a pickled job
(the way an executor on other processes ships it) stores an artifact there, and a second
attempt there loads it. Not named ``test_*``: pytest does not collect it as a test."""

from __future__ import annotations

import dataclasses
import os
import pickle
from datetime import UTC, datetime
from typing import Any

import numpy as np

import wfkit as wf
from wfkit.definition.activities import CancelFlag
from wfkit.engine.executor import AttemptResult, run_attempt


def make(ctx: wf.ActivityContext[Any]) -> Any:
    """Return a large array as an artifact."""
    return {"pid": os.getpid(), "grid": wf.Artifact(np.arange(100_000).reshape(100, 1000))}


def check(ctx: wf.ActivityContext[Any]) -> Any:
    """Load the array the earlier step stored and sum it."""
    return {"pid": os.getpid(), "total": int(ctx.load(ctx.outputs["make"]["grid"]).sum())}


def peek(ctx: wf.ActivityContext[Any]) -> Any:
    """Load the reference the run's data holds (which may not be this run's to load)."""
    return {"pid": os.getpid(), "size": len(ctx.load(ctx.data["ref"]))}


def attempt(shipped: bytes, name: str) -> AttemptResult:
    """Run the pickled job with the activity ``name`` of this module, as a worker would."""
    job = pickle.loads(shipped)
    job = dataclasses.replace(job, function=globals()[name], cancel=CancelFlag())
    return run_attempt(job, lambda: datetime.now(UTC))
