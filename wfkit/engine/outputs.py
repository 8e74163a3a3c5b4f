"""Recording a step's output: by node, and inside for_each loops by cell."""

from __future__ import annotations

from typing import Any

from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.loops import cell_key

__all__ = ["record_output"]


def record_output(cp: Checkpoint, node_id: str, path: tuple[int, ...], output: Any) -> None:
    """Keep a step's output: by node, and inside for_each loops by cell (``"2"``, ``"2.0"``)."""
    if output is None:
        return
    if not path:
        cp.run.put("outputs", node_id, output)
        return
    current = cp.run.outputs.get(node_id)
    cells = dict(current) if isinstance(current, dict) else {}
    cells[cell_key(path)] = output
    cp.run.put("outputs", node_id, cells)
