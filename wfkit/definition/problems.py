"""Validation problems: what is wrong, where, and how bad."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["Problem", "Severity"]


class Severity(StrEnum):
    """How bad a problem is."""

    ERROR = "error"  # the workflow cannot be registered or run
    WARNING = "warning"  # allowed, but probably not what was meant


class Problem(BaseModel):
    """One problem found by validation, about a node or an edge (or the whole workflow).

    ``node`` names the node; for an edge problem ``edge`` holds ``(source, target, outlet)`` and
    ``node`` the source.
    """

    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    node: Any = None
    edge: tuple[Any, Any, Any] | None = None
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        where = (
            f"edge {self.edge[0]} -[{self.edge[2]}]-> {self.edge[1]}"
            if self.edge
            else f"node {self.node!r}"
            if self.node
            else "workflow"
        )
        return f"{self.severity.value}: {where}: {self.message} [{self.code}]"
