"""What each activity does: a pure function of (node, attempt, loop path, visit).

The engine's test activities and the reference model both call :func:`step_result` and
:func:`compensation_result`, so neither thread order nor branch order can change an outcome.
Every step writes only its own cell of the data (``w[cell]`` and the visit counter ``n[cell]``),
so parallel branches and for_each items write disjoint paths.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["ok", "fail", "fallback"]
Path = tuple[int, ...]

# per-node behaviours a generated plan picks from
PROFILES = ("ok",) * 5 + ("flaky", "flaky", "fail", "fallback", "mixed")


def cell_key(node: str, path: Path) -> str:
    """The data key of one node's cell: ``node`` or ``node@i.j`` inside for_each."""
    return node + ("@" + ".".join(map(str, path)) if path else "")


@dataclass(frozen=True)
class Result:
    """One attempt's outcome and the data fields it writes (dotted top-level paths)."""

    kind: Kind
    output: Any = None
    writes: tuple[tuple[str, str, Any], ...] = ()  # (field, key, value): data[field][key] = value


@dataclass(frozen=True)
class Plan:
    """A generated outcome plan: a profile per activity node and per compensation."""

    seed: int
    profiles: dict[str, str] = field(default_factory=dict)
    comp_profiles: dict[str, str] = field(default_factory=dict)
    branches: dict[str, tuple[str, ...]] = field(default_factory=dict)  # decide nodes

    def _roll(self, *parts: Any) -> int:
        return zlib.crc32(repr((self.seed, *parts)).encode()) % 100

    def _kind(self, profile: str, attempt: int, *parts: Any) -> Kind:
        if profile == "ok":
            return "ok"
        if profile == "flaky":
            return "fail" if attempt == 1 else "ok"
        if profile == "fail":
            return "fail"
        if profile == "fallback":
            return "fallback"
        roll = self._roll(*parts, attempt)
        return "ok" if roll < 55 else "fail" if roll < 85 else "fallback"

    def step(self, node: str, attempt: int, path: Path, visit: int) -> tuple[Kind, Any]:
        """The kind of an attempt and its output (a branch name for a decision)."""
        kind = self._kind(self.profiles.get(node, "ok"), attempt, node, path, visit)
        if kind != "ok":
            return kind, None
        if node in self.branches:
            names = self.branches[node]
            roll = self._roll("branch", node, path, visit)
            return "ok", names[roll % len(names)] if roll < 90 else "nowhere"
        returns = self._roll("out", node, path, visit) < 70
        return "ok", f"{cell_key(node, path)}#{visit}.{attempt}" if returns else None

    def compensation(self, node: str, attempt: int, path: Path) -> Kind:
        """The kind of a compensation attempt (never a fallback)."""
        kind = self._kind(self.comp_profiles.get(node, "ok"), attempt, "undo", node, path)
        return "ok" if kind == "fallback" else kind


def step_result(plan: Plan, node: str, attempt: int, path: Path, data: dict[str, Any]) -> Result:
    """What the activity of ``node`` does on ``attempt`` given the data it was handed."""
    cell = cell_key(node, path)
    visit = int(data.get("n", {}).get(cell, 0)) + 1
    kind, output = plan.step(node, attempt, path, visit)
    if kind != "ok":
        return Result(kind)
    value = f"{cell}#{visit}.{attempt}"
    return Result("ok", output, (("w", cell, value), ("n", cell, visit)))


def compensation_result(plan: Plan, node: str, attempt: int, path: Path, seen: Any) -> Result:
    """What the compensation of ``node`` does; it writes the output it was shown."""
    kind = plan.compensation(node, attempt, path)
    if kind != "ok":
        return Result(kind)
    return Result("ok", None, (("w", "undo:" + cell_key(node, path), seen),))


Call = tuple[str, str, int, Path, Any]
"""An activity call: ("step"|"comp", node, attempt, loop path, JSON of the output a
compensation was shown as ``ctx.outputs[ctx.node_id]``, None for a step)."""
