"""Frames: the bookkeeping of fork/join scopes (parallel and for_each) inside one run.

A frame records how many branches its join expects and how many completed or failed. A branch
completes when its token reaches the join or its path ends inside the branch; it fails when its
step fails for good with nothing else to handle it. The join leaves through ``completed`` as
soon as enough branches completed (taking the rest away), or through ``partial`` once every
branch settled without that; with no ``partial`` edge the join fails and the failure rules apply.
A for_each frame also starts its next items while fewer than ``max_parallelism`` are in flight.
"""

from __future__ import annotations

from typing import Literal, Unpack

from wfkit.definition.kinds import JoinConfig
from wfkit.engine import drains
from wfkit.engine.checkpoint import Checkpoint
from wfkit.engine.cursor import Frame, FrameChanges, FrameRef, Token
from wfkit.engine.loops import loop_path
from wfkit.engine.vocabulary import EventKind, TokenState

__all__ = [
    "branch_completed",
    "branch_failed",
    "close_frame",
    "decide",
    "launch_items",
    "open_frame",
    "update_frame",
]


def open_frame(
    cp: Checkpoint, fork_id: str, token: Token, expected: int, *, limit: int | None = None
) -> str:
    """Open a frame for the fork ``fork_id``; returns its id. A for_each's frame starts its
    items in order, at most ``limit`` in flight at once."""
    join_id = cp.flow.join_of[fork_id]
    config: JoinConfig = cp.flow.nodes[join_id].config
    frame_id = cp.run.next_id("f")
    frame: Frame = {
        "fork": fork_id,
        "join": join_id,
        "n": expected,
        "done": 0,
        "failed": [],
        "closed": False,
        "fr": token["fr"],
        "mode": config.mode,
        "count": config.count,
    }
    if limit is not None:
        frame = {**frame, "next": 0, "limit": limit}
    cp.run.put("frames", frame_id, frame)
    return frame_id


def close_frame(cp: Checkpoint, frame_id: str) -> None:
    """Forget a frame (and its item list)."""
    cp.run.drop("frames", frame_id)
    if frame_id in cp.run.items:
        cp.run.drop("items", frame_id)


def update_frame(cp: Checkpoint, frame_id: str, **changes: Unpack[FrameChanges]) -> Frame:
    """Change a frame (recorded)."""
    frame: Frame = {**cp.run.frames[frame_id], **changes}
    cp.run.put("frames", frame_id, frame)
    return frame


def branch_failed(cp: Checkpoint, token_id: str, error: str) -> None:
    """A branch failed for good: count it against its frame and see if the join can decide."""
    _fork, frame_id, index = cp.run.tokens[token_id]["fr"][-1]
    cp.end_path(token_id, commit=False)
    frame = cp.run.frames.get(frame_id)
    if frame is None or frame["closed"]:
        return
    last_line = error.strip().splitlines()[-1] if error.strip() else "failed"
    update_frame(cp, frame_id, failed=[*frame["failed"], {"i": index, "error": last_line}])
    detail = {"index": index, "error": last_line}
    cp.event(EventKind.BRANCH_FAILED, frame["join"], token_id, detail=detail)
    _after_branch(cp, frame_id)


def _after_branch(cp: Checkpoint, frame_id: str) -> None:
    if "next" in cp.run.frames[frame_id]:  # a for_each: start its next items
        launch_items(cp, frame_id)
    decide(cp, frame_id)


def decide(cp: Checkpoint, frame_id: str) -> None:
    """Leave the join when the frame is satisfied, or settled without being satisfied."""
    frame = cp.run.frames.get(frame_id)
    if frame is None or frame["closed"]:
        return
    n, done, failed, count = frame["n"], frame["done"], len(frame["failed"]), frame["count"]
    needed = {"all": n, "any": 1, "at_least": n if count is None else count}[frame["mode"]]
    satisfied = done >= needed or n == 0
    settled = done + failed >= n
    if not (satisfied or settled):
        return
    update_frame(cp, frame_id, closed=True)
    for other, t in list(cp.run.tokens.items()):
        if any(f.frame == frame_id for f in t["fr"]):
            drains.take_away(cp, other)  # an attempt in flight is asked to stop
    for nested, inner in list(cp.run.frames.items()):  # forks inside its branches close too
        if any(f.frame == frame_id for f in inner["fr"]):
            close_frame(cp, nested)
    close_frame(cp, frame_id)
    join_id = frame["join"]
    detail = {"completed": done, "failed": failed, "expected": n}
    if satisfied:
        cp.event(EventKind.JOIN_COMPLETED, join_id, detail=detail)
        _continue(cp, join_id, frame, "completed")
        return
    cp.event(EventKind.JOIN_PARTIAL, join_id, detail={**detail, "errors": frame["failed"][:20]})
    if cp.flow.target(join_id, "partial") is not None:
        _continue(cp, join_id, frame, "partial")
        return
    token_id = cp.run.next_id()
    path = loop_path(cp.flow, frame["fr"])
    cp.run.put(
        "tokens",
        token_id,
        {
            "node": join_id,
            "st": TokenState.FAILED,
            "att": 1,
            "fr": frame["fr"],
            "li": path[-1] if path else None,
        },
    )
    errors = "; ".join(f"#{f['i']}: {f['error']}" for f in frame["failed"][:5])
    cp.fail(
        token_id,
        f"join {join_id!r} is partial: {done} of {n} branches completed, {failed} failed "
        f"({errors}); connect its 'partial' outlet (on_partial=) to handle this",
        bypass_failed_outlet=True,
    )


def _continue(
    cp: Checkpoint, join_id: str, frame: Frame, outlet: Literal["completed", "partial"]
) -> None:
    target = cp.flow.target(join_id, outlet)
    if target is not None:
        cp.spawn(target, frame["fr"], origin=join_id)  # moving on may leave a saga: it commits
    else:
        cp.rules.moved(cp, join_id, None, frame["fr"])  # the path ends at the join: sagas
        if frame["fr"]:  # ... and, inside an enclosing branch, that branch is done
            branch_completed(cp, frame["fr"][-1].frame)


def branch_completed(cp: Checkpoint, frame_id: str) -> None:
    """A branch of ``frame_id`` completed: it reached the join, or its path ended inside the
    branch (an end node, an outlet with no edge); see if the join can decide."""
    frame = cp.run.frames.get(frame_id)
    if frame is None or frame["closed"]:
        return
    update_frame(cp, frame_id, done=frame["done"] + 1)
    _after_branch(cp, frame_id)


def launch_items(cp: Checkpoint, frame_id: str) -> None:
    """Start branches for the next items while fewer than ``max_parallelism`` are in flight."""
    frame = cp.run.frames[frame_id]
    fork_id = frame["fork"]
    target = cp.flow.target(fork_id, "each")
    assert target is not None  # validation refuses a for_each whose each outlet leads nowhere
    while not frame["closed"] and frame["next"] < frame["n"]:
        in_flight = frame["next"] - frame["done"] - len(frame["failed"])
        if in_flight >= frame["limit"]:
            break
        index = frame["next"]
        frame = update_frame(cp, frame_id, next=index + 1)
        cp.spawn(target, [*frame["fr"], FrameRef(fork_id, frame_id, index)])
        frame = cp.run.frames.get(frame_id) or {**frame, "closed": True}
