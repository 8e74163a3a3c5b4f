"""Activities: ordinary functions registered under a name that graphs refer to.

The graph stores only the name, so a definition stays plain data; the engine looks the function up
in an :class:`ActivityRegistry` (the module-level default one unless it is given another).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar, overload

from pydantic import BaseModel, ValidationError

from wfkit.definition.typed_outputs import (
    OutputType,
    Unresolved,
    describe_validation,
    output_type_of,
    read_output,
)
from wfkit.errors import UsageError

__all__ = [
    "DEFAULT_QUEUE",
    "ActivityContext",
    "ActivityRegistry",
    "Cancelled",
    "Fallback",
    "activity",
    "default_registry",
]

DEFAULT_QUEUE = "default"
"""The queue of an activity registered without ``queue=``."""

D = TypeVar("D")
F = TypeVar("F", bound=Callable[..., Any])
M = TypeVar("M", bound=BaseModel)


class Cancelled(BaseException):
    """Raised inside an activity whose attempt was cancelled (timeout or run cancelled).

    It derives from ``BaseException`` so that ``except Exception`` in activity code cannot
    swallow it.
    """


class Fallback(Exception):
    """Raise in an activity to leave through the node's ``fallback`` outlet, without retries.

    Where ``fallback`` is not connected, it counts as an ordinary failure.
    """


class CancelFlag:
    """A one-way flag: set once when an attempt must stop (cheaper than ``threading.Event``)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        """Raise the flag."""
        self._set = True

    def is_set(self) -> bool:
        """True once raised."""
        return self._set


_LOGGER = logging.getLogger("wfkit.activity")


@dataclass
class ActivityContext(Generic[D]):
    """What an activity receives.

    ``data`` is the run's data document (a model instance when the workflow declares one); change
    it and the change is checkpointed as a patch. ``outputs`` holds the recorded outputs of nodes
    that already ran (inside for_each loops, by cell: ``"2"``, or ``"2.0"`` nested). Inside a
    for_each, ``item`` is the innermost loop's item, ``loop_index`` its index and ``loop_path``
    the index of every enclosing for_each, outermost first (``()`` outside any). Everything but
    ``data`` is this attempt's own copy: changing it changes nothing in the run; the return value
    and ``data`` are the only ways an activity changes its run. ``idempotency_key`` is the same
    for every attempt of the same step.

    ``input`` is the data document the run was admitted with (typed like ``data``), whatever the
    document became since; ``output(node_id, Model)`` reads an earlier step's output as a model.
    ``logger`` is this attempt's logger: its records carry ``run_id``, ``workflow_id``,
    ``node_id``, ``activity``, ``attempt`` and ``loop_path``, and those at INFO and above are
    kept with the run (``run.logs()``).
    """

    data: D
    instance_id: str
    node_id: str
    definition_id: str
    version: int
    attempt: int = 1
    outputs: Mapping[str, Any] = field(default_factory=dict)
    loop_index: int | None = None
    item: Any = None
    loop_path: tuple[int, ...] = ()
    idempotency_key: str = ""
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = _LOGGER
    cancel_event: CancelFlag = field(default_factory=CancelFlag, repr=False)
    on_heartbeat: Callable[[], None] | None = field(default=None, repr=False)
    # the run's input as JSON text (what `input` decodes), the workflow's data model, and every
    # node's enclosing for_each nodes (what `output` reads by loop cell); set by the engine
    input_json: str | None = field(default=None, repr=False)
    data_model: type[BaseModel] | None = field(default=None, repr=False)
    loop_scopes: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    # reads an artifact reference back (``load``); set by the engine
    loader: Callable[[Any], Any] | None = field(default=None, repr=False)

    @cached_property
    def input(self) -> D:
        """The data document the run was admitted with: a model instance when the workflow
        declares a model, else a dict. This attempt's own copy, decoded on first use: changing
        it changes nothing. It never changes during the run (``data`` does), and a run restarted
        with ``engine.restart_as_new`` has the same input.
        """
        if self.input_json is None:
            raise UsageError(
                f"this context of {self.node_id!r} has no run input; contexts the engine builds "
                "always have one (build yours with input_json='{...}' to test an activity)"
            )
        if self.data_model is None:
            value: Any = json.loads(self.input_json)
            return value
        try:
            return self.data_model.model_validate_json(self.input_json)  # type: ignore[return-value]
        except ValidationError as exc:
            raise UsageError(
                f"the input of run {self.instance_id} no longer fits "
                f"{self.data_model.__name__}: {describe_validation(exc)}; the model changed "
                "after the run started: make the change backwards compatible (defaults for new "
                "fields), or read ctx.data"
            ) from None

    @overload
    def output(self, node_id: str, model: None = None, *, cell: str | int | None = None) -> Any: ...

    @overload
    def output(self, node_id: str, model: type[M], *, cell: str | int | None = None) -> M: ...

    def output(
        self, node_id: str, model: type[M] | None = None, *, cell: str | int | None = None
    ) -> Any:
        """The output of an earlier step: its JSON value, or validated as ``model``.

        Inside a for_each, a step of the same loop is read in this attempt's own cell (the
        output of this item); a step in a loop this one is not inside keeps a map of cells
        (``{"0": ..., "2": ...}``), of which ``cell="2"`` (``"1.0"`` nested) names one.

        Raises
        ------
        UsageError
            The node is unknown, has no output yet (in this cell), or its output does not fit
            ``model`` (the message names the fields).
        """
        return read_output(
            self.outputs,
            node_id,
            model,
            reader=self.node_id,
            loop_path=self.loop_path,
            scopes=self.loop_scopes,
            cell=cell,
        )

    def load(self, ref: Any) -> Any:
        """The value of an artifact reference (what a step that returned ``wf.Artifact(...)``
        recorded in its output or in ``data``): a DataFrame, a numpy array, bytes, str, or a
        local ``pathlib.Path`` for a file.

        Only an artifact the engine stored for this run or a run of its family (linked to it
        by calls and restarts) loads, unless the engine has ``artifacts_shared=True``; at most
        its recorded size is read, and its SHA-256 is checked first. An attempt on another
        process (a Dask worker) loads the references found in its run's data, outputs, input
        and item.

        Raises
        ------
        ArtifactError
            The reference is refused (not one the engine issued, or not to this run), or the
            artifact is missing or was changed since it was stored (the message names it).
        UsageError
            ``ref`` is not an artifact reference.
        """
        if self.loader is None:
            raise UsageError(
                f"this context of {self.node_id!r} cannot load artifacts; contexts the engine "
                "builds can (build yours with loader=engine.load_artifact to test an activity)"
            )
        return self.loader(ref)

    @property
    def cancelled(self) -> bool:
        """True once the engine asked this attempt to stop (timeout or run cancelled)."""
        return self.cancel_event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` when the attempt was cancelled; call it in long loops."""
        if self.cancel_event.is_set():
            raise Cancelled(f"attempt {self.attempt} of {self.node_id!r} was cancelled")

    def heartbeat(self) -> None:
        """Tell the engine a long activity is still alive (and check for cancellation)."""
        if self.on_heartbeat is not None:
            self.on_heartbeat()
        self.raise_if_cancelled()


class ActivityRegistry:
    """Maps activity names to functions.

    Examples
    --------
    >>> reg = ActivityRegistry()
    >>> @reg.activity("mail.send")
    ... def send(ctx): return {"sent": True}
    >>> "mail.send" in reg, reg.is_async("mail.send")
    (True, False)
    """

    def __init__(self) -> None:
        self._functions: dict[str, Callable[..., Any]] = {}
        self._queues: dict[str, str] = {}  # only activities outside the default queue
        self._outputs: dict[str, OutputType | None] = {}
        self._unresolved: set[str] = set()  # return annotations to resolve again on first use
        self._lock = threading.Lock()

    def register(
        self,
        name: str,
        function: Callable[..., Any],
        *,
        replace: bool = True,
        queue: str = DEFAULT_QUEUE,
    ) -> None:
        """Register ``function`` under ``name``; re-registering replaces (notebook re-runs).

        ``queue`` names the worker pool that runs its steps (and its compensations, where it is
        one): ``engine.start_workers(queues=[...])`` and ``wfkit worker --queue`` serve only
        the queues they name; ``"default"`` unless given.

        A return annotation that is a pydantic model (``-> Receipt``, ``-> Receipt | None``)
        types the activity's output (see :meth:`output_type`); it is resolved here, once.
        """
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"activity name must be a non-empty string, got {name!r}")
        if not callable(function):
            raise UsageError(f"activity {name!r} must be callable, got {function!r}")
        check_queue(queue, f"activity {name!r}")
        declared, unresolved = _declared(name, function, final=False)
        with self._lock:
            if not replace and name in self._functions:
                raise UsageError(
                    f"activity {name!r} is already registered to {self._functions[name]!r}; "
                    "pick another name or pass replace=True"
                )
            self._functions[name] = function
            if queue == DEFAULT_QUEUE:
                self._queues.pop(name, None)
            else:
                self._queues[name] = queue
            self._outputs[name] = declared
            if unresolved:
                self._unresolved.add(name)
            else:
                self._unresolved.discard(name)

    def output_type(self, name: str) -> OutputType | None:
        """The model the activity ``name`` declares it returns, or None (untyped).

        A return annotation naming something its module did not define yet when the activity
        was registered (a model declared below the function) is resolved once more here, the
        first time it is asked for; still unresolved, the output stays untyped (logged at
        debug level).
        """
        if name in self._unresolved:
            with self._lock:
                if name in self._unresolved:
                    self._unresolved.discard(name)
                    self._outputs[name] = _declared(name, self._functions[name], final=True)[0]
        return self._outputs.get(name)

    def activity(self, name: str, *, queue: str = DEFAULT_QUEUE) -> Callable[[F], F]:
        """Decorator form of :meth:`register`; returns the function unchanged."""

        def decorate(function: F) -> F:
            self.register(name, function, queue=queue)
            return function

        return decorate

    def queue_of(self, name: str) -> str:
        """The queue of the activity ``name`` (``"default"`` unless registered with one)."""
        return self._queues.get(name, DEFAULT_QUEUE)

    def queues(self) -> list[str]:
        """The queues of the registered activities, sorted (``"default"`` among them when
        an activity has no other)."""
        named = set(self._queues.values())
        if len(self._queues) < len(self._functions):
            named.add(DEFAULT_QUEUE)
        return sorted(named)

    def get(self, name: str) -> Callable[..., Any]:
        """The function registered as ``name``; raises ``UsageError`` naming what exists."""
        try:
            return self._functions[name]
        except KeyError:
            known = ", ".join(sorted(self._functions)) or "none"
            raise UsageError(
                f"no activity is registered as {name!r} (registered: {known}); "
                f"decorate a function with @wf.activity({name!r})"
            ) from None

    def is_async(self, name: str) -> bool:
        """True when the activity is an ``async def`` function."""
        return inspect.iscoroutinefunction(self.get(name))

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._functions)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._functions)


def check_queue(queue: object, what: str) -> str:
    """``queue`` when it is a usable queue name; else ``UsageError`` naming ``what``."""
    if not isinstance(queue, str) or not queue.strip() or queue != queue.strip():
        raise UsageError(
            f"the queue of {what} must be a non-empty name without surrounding spaces, got "
            f"{queue!r}; e.g. queue='gpu' (queue='default' where it needs no pool of its own)"
        )
    return queue


def _declared(
    name: str, function: Callable[..., Any], *, final: bool
) -> tuple[OutputType | None, bool]:
    """The output type ``function`` declares, and whether its annotation is still unresolved."""
    try:
        return output_type_of(function, name), False
    except Unresolved as exc:
        when = "its output is untyped" if final else "tried again when it first runs"
        _LOGGER.debug("activity %r: return annotation not resolved (%s); %s", name, exc, when)
        return None, not final


default_registry = ActivityRegistry()


def activity(name: str, *, queue: str = DEFAULT_QUEUE) -> Callable[[F], F]:
    """Register a function (sync or async) as the activity ``name`` in the default registry.

    Parameters
    ----------
    name : str
        The name graphs use to refer to the function, e.g. ``"orders.ship-line"``.
    queue : str
        The queue whose workers run its steps (``"default"`` unless given): engines started
        with ``start_workers(queues=["gpu"])`` or ``wfkit worker --queue gpu`` run only the
        steps of the queues they serve; ``run_until_idle()`` runs every queue.

    Examples
    --------
    >>> import wfkit as wf
    >>> @wf.activity("docs.hello")
    ... def hello(ctx):
    ...     return {"greeting": "hello"}
    >>> "docs.hello" in wf.default_registry
    True
    >>> @wf.activity("docs.render", queue="gpu")
    ... def render(ctx):
    ...     return None
    >>> wf.default_registry.queue_of("docs.render")
    'gpu'
    """
    return default_registry.activity(name, queue=queue)
