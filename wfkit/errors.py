"""One exception tree for wfkit.

Every message says what happened and what to do next::

    WfkitError
    ├── DefinitionError        a workflow graph that breaks the rules (carries every problem)
    │   └── ExpressionError    an expression that is unsafe, malformed or reads unknown names
    ├── AdmissionError         a run refused at start (carries every reason; nothing written)
    ├── StoreError             the store failed (the driver's exception is the __cause__)
    ├── ArtifactError          an artifact not stored, a reference refused, a file gone or changed
    ├── WorkflowFailed         a run ended in failure (carries the recorded error)
    │   └── VisitLimitExceeded a loop went round more often than max_visits allows
    ├── SignalError            a signal or approval that cannot be delivered
    └── UsageError             the API was called in a way it does not support
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wfkit.definition.problems import Problem

__all__ = [
    "AdmissionError",
    "ArtifactError",
    "DefinitionError",
    "ExpressionError",
    "SignalError",
    "StoreError",
    "UsageError",
    "VisitLimitExceeded",
    "WfkitError",
    "WorkflowFailed",
]


class WfkitError(Exception):
    """Base class of every error wfkit raises on purpose."""


class DefinitionError(WfkitError):
    """A workflow definition breaks one or more rules.

    ``problems`` holds every problem found (not just the first), each with the node or edge it is
    about, a short code, a message and a severity.
    """

    def __init__(self, message: str, problems: Sequence[Problem] = ()) -> None:
        super().__init__(message)
        self.problems: list[Problem] = list(problems)

    @classmethod
    def from_problems(cls, subject: str, problems: Iterable[Problem]) -> DefinitionError:
        """Build one error listing every problem, one per line."""
        found = list(problems)
        lines = [f"{subject} has {len(found)} problem{'s' if len(found) != 1 else ''}:"]
        lines += [f"  - {p}" for p in found]
        lines.append("Fix them and validate again (flow.validate() lists them as data).")
        return cls("\n".join(lines), found)


class ExpressionError(DefinitionError):
    """An expression is unsafe, malformed, or reads names the data document does not have."""

    def __init__(
        self,
        message: str,
        *,
        expression: str,
        node: str | None = None,
        code: str = "expression",
    ) -> None:
        super().__init__(message)
        self.expression = expression
        self.node = node
        self.code = code


class AdmissionError(WfkitError):
    """A run was refused at admission; ``reasons`` lists every reason and nothing was written."""

    def __init__(self, message: str, reasons: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.reasons = list(reasons)


class StoreError(WfkitError):
    """The store could not do what was asked; the driver's exception is the ``__cause__``."""


class ArtifactError(WfkitError):
    """An artifact could not be stored, or a reference was refused (not one the engine issued
    to this run), or the artifact is missing or was changed since it was stored (the message
    names the reference)."""


class WorkflowFailed(WfkitError):
    """A run ended in failure; ``error`` is the recorded error text."""

    def __init__(self, message: str, *, run_id: str | None = None, error: str | None = None):
        super().__init__(message)
        self.run_id = run_id
        self.error = error


class VisitLimitExceeded(WorkflowFailed):
    """A run failed because a node was reached more often than its ``max_visits`` allows.

    ``run.result()`` raises it (a :class:`WorkflowFailed`) for such runs.
    """


class SignalError(WfkitError):
    """A signal or approval could not be delivered; the wait it addressed is left in place."""


class UsageError(WfkitError):
    """The API was used in a way it does not support; the message says the supported way."""
