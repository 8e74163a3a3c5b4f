"""Activity queues: which worker pool runs a step.

An activity belongs to one queue (``@wf.activity("render", queue="gpu")``; ``"default"`` unless
given); a compensation runs on the queue of its compensation activity. An engine's worker pool
serves either every queue (``start_workers()``, and ``run_until_idle()`` always) or the queues it
names (``start_workers(queues=["gpu"])``, ``wfkit worker --queue gpu``). A ready step of a queue
its engine does not serve is *blocked* like a step whose activity is not registered here: it
stays ready, ``wf_jobs`` says ``blocked``, ``run.explain()`` names the queue, and on a shared
store the run is handed over to an engine that serves it (see :mod:`wfkit.engine.leases`).
"""

from __future__ import annotations

from collections.abc import Iterable

from wfkit.definition.activities import ActivityRegistry, check_queue
from wfkit.engine.cursor import Token
from wfkit.engine.state import RunState
from wfkit.engine.vocabulary import TokenState
from wfkit.errors import UsageError

__all__ = [
    "Served",
    "handed_over_words",
    "served_queues",
    "step_activity",
    "unserved_queue",
    "unserved_words",
]

Served = frozenset[str] | None
"""The queues a pool serves; None: every queue."""


def served_queues(queues: Iterable[str] | None) -> Served:
    """The checked set of queue names a pool is asked to serve (None: every queue)."""
    if queues is None:
        return None
    if isinstance(queues, str):
        raise UsageError(
            f"queues must be a list of queue names, got the string {queues!r}; "
            f"write queues=[{queues!r}]"
        )
    try:
        names = list(queues)
    except TypeError:
        raise UsageError(
            f"queues must be a list of queue names, got {queues!r}; e.g. queues=['gpu']"
        ) from None
    if not names:
        raise UsageError(
            "queues=[] would serve no queue, so the workers would run nothing; name the queues "
            "to serve (queues=['gpu']) or leave queues out to serve every queue"
        )
    return frozenset(check_queue(name, "a worker pool") for name in names)


def step_activity(run: RunState, token: Token) -> str:
    """The activity a token's step runs: the undo activity for a compensation ('' for none)."""
    node = run.flow.nodes[token["node"]]
    name = node.compensation if "comp" in token else node.activity
    return name or ""


def unserved_queue(
    registry: ActivityRegistry, served: Served, run: RunState, token: Token
) -> str | None:
    """The queue a ready step waits for when the pool does not serve it (its activity is
    registered here), else None."""
    if served is None or token["st"] != TokenState.READY:
        return None
    name = step_activity(run, token)
    if not name or name not in registry:
        return None
    queue = registry.queue_of(name)
    return None if queue in served else queue


def handed_over_words(run: RunState, token: Token, queue: str) -> str:
    """What ``run.explain()`` says of a ready step of a run handed over for its queue."""
    return (
        f"{_what(run, token)} is ready: waits for queue {queue!r}; the run was handed over to "
        f"the engines whose workers serve it, and none has taken it yet (start_workers(queues="
        f"[{queue!r}]) or run `wfkit worker --queue {queue}`)"
    )


def _what(run: RunState, token: Token) -> str:
    if "comp" in token:
        return f"compensation {step_activity(run, token)!r} of {token['node']!r}"
    return f"step {token['node']!r}"


def unserved_words(run: RunState, token: Token, queue: str) -> str:
    """What ``run.explain()`` says of a ready step whose queue this engine does not serve."""
    return (
        f"{_what(run, token)} is ready: waits for queue {queue!r}, which no worker of this "
        f"engine serves; start_workers(queues=[{queue!r}]) or run `wfkit worker --queue {queue}`"
    )
