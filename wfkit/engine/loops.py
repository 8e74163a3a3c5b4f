"""Where a token stands inside (possibly nested) for_each loops: its index path and its item.

A token's frames (``token["fr"]``) list every fork it is inside, outermost first, as
:class:`~wfkit.engine.cursor.FrameRef` ``(fork, frame, index)``; the for_each ones make its
*loop path*. The innermost index is
``ctx.loop_index``, the whole path ``ctx.loop_path``, and a node's outputs inside loops are kept
per cell under :func:`cell_key` of the path ("2" for one level, "2.0" nested).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from wfkit.engine.cursor import Frame, FrameRef, SagaEntry, Token
from wfkit.engine.flows import CompiledFlow
from wfkit.engine.state import RunState

__all__ = ["cell_key", "entry_path", "job_cell", "loop_detail", "loop_item", "loop_path"]


def loop_path(flow: CompiledFlow, frames: Sequence[FrameRef]) -> tuple[int, ...]:
    """The for_each indexes of ``frames``, outermost first (``()`` outside any for_each)."""
    return tuple(int(f.index) for f in frames if flow.nodes[f.fork].spec.loops)


def loop_item(
    flow: CompiledFlow,
    open_frames: dict[str, Frame],
    frames: Sequence[FrameRef],
    items: dict[str, list[Any]] | None = None,
) -> Any:
    """The item of the innermost for_each among ``frames`` (None outside any, or once its
    frame has closed). ``items`` is the run's item lists by frame (older snapshots kept the
    list in the frame itself)."""
    for fork_id, frame_id, index in reversed(frames):
        if flow.nodes[fork_id].spec.loops:
            found = (items or {}).get(frame_id)
            if found is None:
                frame = open_frames.get(frame_id)
                found = frame.get("items") if frame is not None else None
            return found[index] if found is not None and index < len(found) else None
    return None


def cell_key(path: Sequence[int]) -> str:
    """The key of one loop cell in a node's outputs: the indexes joined by dots.

    Examples
    --------
    >>> cell_key((3,)), cell_key((1, 0))
    ('3', '1.0')
    """
    return ".".join(str(i) for i in path)


def loop_detail(path: Sequence[int]) -> dict[str, Any] | None:
    """Event detail naming the loop cell (None outside any for_each)."""
    if not path:
        return None
    return {"loop_index": path[-1], "loop_path": list(path)}


def job_cell(run: RunState, token: Token) -> tuple[tuple[int, ...], str | None, tuple[Any, ...]]:
    """For an attempt of ``token``: its loop path, its item as JSON, and (for a compensation)
    the output of the visit it undoes, as ``(output,)``.

    A compensation is run from its saga entry, which kept the loop cell, item and output of its
    own visit (entries written before they kept them fall back to the run's outputs).
    """
    if "comp" in token:
        entry = run.saga.get(token.get("entry") or "")
        if entry is None:
            return (), None, ()
        path = entry_path(entry)
        item = entry.get("item")
        own = (entry["out"],) if "out" in entry else ()
        return path, None if item is None else _dumps(item), own
    path = loop_path(run.flow, token["fr"])
    if not path:
        return (), None, ()
    item = loop_item(run.flow, run.frames, token["fr"], run.items)
    return path, None if item is None else _dumps(item), ()


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def entry_path(entry: SagaEntry) -> tuple[int, ...]:
    """The loop cell of a saga entry's visit (entries from before ``lp`` keep only ``li``)."""
    if "lp" in entry:
        return tuple(entry["lp"])
    li = entry.get("li")
    return () if li is None else (int(li),)
