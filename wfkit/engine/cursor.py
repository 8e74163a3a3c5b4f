"""The records of a run's cursor, typed: tokens, frames, saga entries, unwinds, and the run's
ending, caller and retry record.

Each record is a ``TypedDict``, so at run time it is the plain dict that is stored as JSON
(``wf_instances.state``, ``wf_events.delta``): nothing is converted on the way out, and on the
way in only frame references (JSON lists) become :class:`FrameRef` tuples again. To mypy a
record's keys are known, read-only and typed, and its state fields take only the values of their
vocabulary (:mod:`wfkit.engine.vocabulary`). Read-only keys keep what
:meth:`~wfkit.engine.state.RunState.freeze` relies on: an entry is never changed in place,
every change puts a new one. The keys are the short ones stored on disk; each field's
docstring says what it holds.

The stored JSON has a format version, written into every snapshot as ``v`` (:data:`FORMAT`):

1. (snapshots without ``v``) A saga entry kept its state under ``st``, the key a token keeps
   its own under.
2. A saga entry keeps its state under ``state``.

:func:`revive` reads an entry of either format as the code writes it now; recovery applies it
to every snapshot entry and to every entry a logged delta sets (deltas carry no version: a run
written by an older wfkit may have deltas of both formats after its snapshot).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

from typing_extensions import ReadOnly

from wfkit.engine.vocabulary import EndKind, SagaEntryState, TimerKind, TokenState

__all__ = [
    "FORMAT",
    "BranchFailure",
    "Caller",
    "Ending",
    "Frame",
    "FrameChanges",
    "FrameRef",
    "ResumePoint",
    "RetryRecord",
    "SagaEntry",
    "Token",
    "TokenChanges",
    "Unwind",
    "UnwindThen",
    "revive",
    "revive_all",
]

FORMAT = 2
"""The version of the cursor's stored JSON (see the module's docstring)."""


class FrameRef(NamedTuple):
    """One fork a token is inside; stored as the JSON list ``[fork, frame, index]``."""

    fork: str
    """The parallel or for_each node that opened the frame."""
    frame: str
    """The frame's id (a key of ``RunState.frames``)."""
    index: int  # type: ignore[assignment]  # the field hides tuple.index, which no code calls
    """The branch's index (parallel), or the item's (for_each)."""


class Token(TypedDict):
    """Where one token stands: its node, its state there, the attempt of the node's step."""

    node: ReadOnly[str]
    """The node it stands at."""
    st: ReadOnly[TokenState]
    """Where it stands there."""
    att: ReadOnly[int]
    """The attempt of its node's step or compensation (1 for a node that runs no activity)."""
    fr: ReadOnly[list[FrameRef]]
    """Every fork it is inside, outermost first (empty outside any)."""
    li: ReadOnly[int | None]
    """The innermost for_each index of its frames (for a compensation, of the visit it undoes);
    None outside any for_each."""
    timer: ReadOnly[NotRequired[TimerKind | None]]
    """The kind of the timer row it is parked on; None once that timer fired or was cleared."""
    due: ReadOnly[NotRequired[str | None]]
    """When that timer is due (ISO 8601)."""
    started: ReadOnly[NotRequired[int]]
    """The attempt a durable start marker was written for (a step that may have been running
    when its engine process died); gone once the token moves on."""
    comp: ReadOnly[NotRequired[str]]
    """A compensation's token: the unwind it runs for (a key of ``RunState.unwinds``)."""
    entry: ReadOnly[NotRequired[str]]
    """A compensation's token: the saga entry it undoes (a key of ``RunState.saga``)."""
    child: ReadOnly[NotRequired[str]]
    """A call's token: the child run it waits for."""
    why: ReadOnly[NotRequired[Literal["end", "join"]]]
    """A cancelling token: what took it away, the run's end or a join that no longer needs it."""
    error: ReadOnly[NotRequired[str]]
    """A suspended token: why it waits for an operator."""


class TokenChanges(TypedDict, total=False):
    """The fields :meth:`~wfkit.engine.checkpoint.Checkpoint.set_token` may change."""

    st: TokenState
    att: int
    timer: TimerKind | None
    due: str | None
    started: int
    child: str
    why: Literal["end", "join"]
    error: str


class BranchFailure(TypedDict):
    """A branch of a frame that failed for good."""

    i: ReadOnly[int]
    """The branch's index (the item's, in a for_each)."""
    error: ReadOnly[str]
    """The last line of its error."""


class Frame(TypedDict):
    """An open parallel or for_each scope and what its join has heard so far."""

    fork: ReadOnly[str]
    """The node that opened it."""
    join: ReadOnly[str]
    """The join that gathers its branches."""
    n: ReadOnly[int]
    """How many branches it has (the items, for a for_each)."""
    done: ReadOnly[int]
    """How many branches completed."""
    failed: ReadOnly[list[BranchFailure]]
    """The branches that failed for good, in the order they failed."""
    closed: ReadOnly[bool]
    """Its join decided: nothing more counts."""
    fr: ReadOnly[list[FrameRef]]
    """The frames its fork is inside, outermost first."""
    mode: ReadOnly[Literal["all", "any", "at_least"]]
    """How many completed branches satisfy the join (its ``mode``)."""
    count: ReadOnly[int | None]
    """The ``at_least`` count."""
    next: ReadOnly[NotRequired[int]]
    """A for_each: the index of the next item to start."""
    limit: ReadOnly[NotRequired[int]]
    """A for_each: how many items may be in flight at once (``max_parallelism``)."""
    items: ReadOnly[NotRequired[list[Any]]]
    """A for_each of an older snapshot: its items (``RunState.items`` keeps them now)."""


class FrameChanges(TypedDict, total=False):
    """The fields :func:`~wfkit.engine.frames.update_frame` may change."""

    done: int
    failed: list[BranchFailure]
    closed: bool
    next: int


class SagaEntry(TypedDict):
    """A compensable step that completed, on its saga's stack."""

    saga: ReadOnly[str]
    """The innermost saga the step is in."""
    node: ReadOnly[str]
    """The step."""
    comp: ReadOnly[str]
    """Its compensation activity."""
    pos: ReadOnly[int]
    """Its position on the run's stack (1 for the first pushed); unwinds go newest first."""
    state: ReadOnly[SagaEntryState]
    """Where it stands (format 1 kept this under ``st``)."""
    li: ReadOnly[int | None]
    """The innermost for_each index of the visit (None outside any)."""
    out: ReadOnly[NotRequired[Any]]
    """The visit's output, handed to the compensation (``ctx.output``)."""
    fr: ReadOnly[NotRequired[list[FrameRef]]]
    """The frames of the visit (absent outside any): its branch or loop cell."""
    lp: ReadOnly[NotRequired[list[int]]]
    """The loop path of the visit (absent outside any for_each)."""
    item: ReadOnly[NotRequired[Any]]
    """The for_each item of the visit (absent outside any for_each)."""


class UnwindThen(TypedDict):
    """What follows an unwind once every step of it is compensated."""

    kind: ReadOnly[Literal["branch", "fail_run"]]
    """``branch``: the failing branch reports to its join; ``fail_run``: the run fails."""
    token: ReadOnly[str]
    """The failing token."""


class Unwind(TypedDict):
    """A saga unwind in progress."""

    steps: ReadOnly[list[str]]
    """The saga entries to compensate, newest first."""
    pos: ReadOnly[int]
    """The index in ``steps`` of the one being compensated."""
    then: ReadOnly[UnwindThen]
    """What follows once it is done."""
    error: ReadOnly[str]
    """The failure that started it."""


class ResumePoint(TypedDict):
    """Where a failed run goes on when it is tried again (:mod:`wfkit.engine.run_retries`)."""

    node: ReadOnly[str]
    """The node its next attempt starts at."""
    token: ReadOnly[str]
    """The failing token (the new one keeps its id, and so the step its idempotency key)."""
    auto: ReadOnly[bool]
    """A RunRetry may retry it; False after ``on_failure="terminate"`` (an operator may)."""


class Ending(TypedDict):
    """The end of a run that waits for its attempts in flight to stop (key ``"run"``)."""

    end: ReadOnly[EndKind]
    """How the run ends."""
    token: ReadOnly[NotRequired[str]]
    """An unwind: the failing token."""
    error: ReadOnly[NotRequired[str]]
    """A failure or an unwind: the error."""
    node: ReadOnly[NotRequired[str | None]]
    """A failure or an unwind: the node that failed."""
    resume: ReadOnly[NotRequired[ResumePoint | None]]
    """A failure: where a run retry would go on (None where none can)."""
    reason: ReadOnly[NotRequired[str]]
    """A cancel: the operator's reason."""
    actor: ReadOnly[NotRequired[str | None]]
    """A cancel: the operator."""


class Caller(TypedDict):
    """The run whose call node started this one (key ``"run"``)."""

    run: ReadOnly[str]
    """The calling run."""
    token: ReadOnly[str]
    """Its token that waits at the call node."""
    node: ReadOnly[str]
    """The call node."""
    depth: ReadOnly[int]
    """How deep this run is nested (1 for a child of a run nobody called)."""
    lineage: ReadOnly[NotRequired[list[str]]]
    """The workflow ids of its callers, outermost first (runs started before it was recorded
    have none)."""


class RetryRecord(TypedDict):
    """The run attempt and where a failed run goes on when tried again (key ``"run"``)."""

    attempt: ReadOnly[int]
    """The run attempt under way, or the last one that ended."""
    resume: ReadOnly[str | None]
    """The node the next attempt starts at; None where the run cannot go on."""
    token: ReadOnly[str | None]
    """The failing token, whose id the next attempt's token takes."""


# a FrameRef from its stored list, as cheaply as can be (FrameRef(*f) also checks the field
# count, but these lists are our own JSON)
_ref = partial(tuple.__new__, FrameRef)


def revive(kind: str, value: Any) -> Any:
    """An entry of the cursor's map ``kind`` as decoded from JSON of any format, made what the
    code writes now: frame references are :class:`FrameRef` again, a saga entry's state is
    under ``state``. Changes ``value`` in place where it can; returns the entry."""
    if kind == "saga":
        if "st" in value:  # format 1
            value = {("state" if k == "st" else k): v for k, v in value.items()}
        frames = value.get("fr")
        if frames:
            value["fr"] = list(map(_ref, frames))
    elif kind == "tokens" or kind == "frames":
        frames = value["fr"]
        if frames:
            value["fr"] = list(map(_ref, frames))
    return value


def revive_all(kind: str, entries: dict[str, Any]) -> None:
    """:func:`revive` every entry of the map ``kind`` (a snapshot's), in place."""
    if kind == "saga":
        for key, entry in entries.items():
            entries[key] = revive(kind, entry)
    elif kind == "tokens" or kind == "frames":
        for entry in entries.values():  # (revive, inlined: a snapshot may hold many)
            frames = entry["fr"]
            if frames:
                entry["fr"] = list(map(_ref, frames))
