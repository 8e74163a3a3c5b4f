"""Suspect steps: ready in a run taken up after its engine process died, they may have been
running then. Each is dispatched only once a worker is free for it, after a durable start marker
(token field ``started`` = the attempt), so a marked attempt is always running, never merely
queued, when a process dies: the next recovery counts it as crashed (see
:mod:`wfkit.engine.crashes`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import TokenState
from wfkit.engine.writer import Writer

__all__ = ["Suspects"]

Step = tuple[RunState, str]


class Suspects:
    """The suspect steps waiting for a free worker, oldest first."""

    def __init__(self) -> None:
        self._steps: deque[Step] = deque()

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, steps: Iterable[Step]) -> None:
        """Queue steps that may have been running when their engine process died."""
        self._steps.extend(steps)

    def clear(self) -> None:
        """Forget them all (their runs were given back)."""
        self._steps.clear()

    def mark(
        self,
        writer: Writer,
        free: int,
        running: Callable[[str, str], bool],
        blocked: Callable[[RunState, str], bool],
    ) -> list[Step]:
        """Release up to ``free`` suspect steps, each with a start marker in its run's
        checkpoint (the next commit is made durable before they start). ``running(run, token)``:
        its attempt runs already; ``blocked(run, step)``: it cannot run here (it is returned,
        unmarked, to wait with the blocked steps). Call under the writer lock."""
        waiting: list[Step] = []
        while self._steps and free > 0:
            run, token_id = self._steps.popleft()
            token = run.tokens.get(token_id)
            if (
                token is None
                or token["st"] != TokenState.READY
                or not writer.holds(run)
                or running(run.run_id, token_id)
            ):
                continue
            if blocked(run, token_id):
                waiting.append((run, token_id))  # a blocked step is not marked: it waits
                continue
            cp = writer.checkpoint(run)
            cp.set_token(token_id, started=token["att"])
            cp.dispatch.append(token_id)
            writer.require_durable()  # the marker is durable before the attempt starts
            free -= 1
        return waiting

    def releasable(self, writer: Writer) -> bool:
        """True when a suspect step waits for a marker (a blocked one never becomes ready)."""
        return any(
            (token := run.tokens.get(t)) is not None
            and token["st"] == TokenState.READY
            and writer.holds(run)
            for run, t in self._steps
        )
