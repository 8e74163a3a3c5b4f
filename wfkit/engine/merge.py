"""Merging a step's data patch into the run's document.

A step's patch is computed against the document it started from (its *base*). Parallel branches
start from the same base, so when a patch lands the document may have moved on: each operation
is applied to the current document (the merge is retried on the newer document, never the
activity), and an operation on a path that another step changed since the base is recorded as a
``merge.conflict`` event instead of being lost silently.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.executor import AttemptResult
from wfkit.engine.vocabulary import EventKind

__all__ = ["merge_result"]

_MISSING = object()


def _value_at(doc: Any, path: str) -> Any:
    try:
        return jsonpointer.resolve_pointer(doc, path)
    except (jsonpointer.JsonPointerException, KeyError, IndexError, TypeError):
        return _MISSING


def merge_result(cp: Checkpoint, token_id: str, result: AttemptResult) -> None:
    """Apply ``result.patch`` to the run's data; record conflicts as events."""
    ops = result.patch
    if not ops:
        return
    run = cp.run
    if result.base_version == run.data_version:
        run.apply_patch(ops)  # nothing changed since the step's base: the common case
        return
    applied: list[dict[str, Any]] = []
    conflicts: list[str] = []
    for op in ops:
        path = op["path"]
        if _value_at(run.data, path) != _value_at(result.base, path):
            conflicts.append(path)  # another step changed this path after our base
        try:
            jsonpatch.apply_patch(run.data, [op], in_place=True)
            applied.append(op)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as exc:
            conflicts.append(f"{path} (not applied: {exc})")
    run.record_patch(applied)
    if conflicts:
        node_id = run.tokens[token_id]["node"]
        cp.event(
            EventKind.MERGE_CONFLICT,
            node_id,
            token_id,
            detail={"paths": conflicts, "attempt": result.attempt},
        )
        if run.flow.workflow.strict_merges:
            cp.strict_conflict = (
                f"merge conflict at {node_id!r}: another parallel step changed "
                f"{', '.join(conflicts)} since this step started; the workflow asks for strict "
                "merges — let parallel branches write disjoint parts of the document"
            )
