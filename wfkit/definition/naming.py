"""Readable unique ids: ``base``, ``base-2``, ``base-3``...; or ``base-1``, ``base-2``... numbered.

The builder names a step after its activity (``card.charge``, ``card.charge-2``...) or its kind
(``if-1``, ``join-1``...), and a splice renames a clashing id ``<workflow>.<id>`` (``-2``...). The
first free name is found by trying ``base-1`` (or ``base-2``), then the next...: from the start
each time, a chain of n steps of one activity costs n²/2 lookups. A :class:`FreeIds` resumes each
base's search where the last one stopped, so a builder names each step in amortised O(1) and
still finds the same name as long as nothing was removed in between.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FreeIds"]


@dataclass
class FreeIds:
    """First free ``base``/``base-i`` names in one growing dict (a graph's nodes, its sagas).

    Whoever adds names to the dict calls :meth:`sync` before and :meth:`note` after; a dict whose
    size or last key is not what was noted (a node removed, the graph edited with networkx in
    between) makes every search start from the beginning again, so the name found is always the
    first free one.

    Examples
    --------
    >>> ids, taken = FreeIds(), {"a": 1}
    >>> ids.pick(taken, "a")
    'a-2'
    >>> ids.sync(taken); taken["a-2"] = 1; ids.note(taken)
    >>> ids.pick(taken, "a"), ids.pick(taken, "if", numbered=True)
    ('a-3', 'if-1')
    """

    resume: dict[tuple[str, bool], int] = field(default_factory=dict)
    """Per ``(base, numbered)``: every ``base-i`` below this number is taken."""
    seen: tuple[int, object] = (-1, None)
    """The dict's size and last key when :meth:`note` was last called."""

    def sync(self, taken: dict[str, Any]) -> None:
        """Forget where the searches stopped if ``taken`` changed since it was last noted."""
        if _mark(taken) != self.seen:
            self.resume.clear()

    def note(self, taken: dict[str, Any]) -> None:
        """Names were added to ``taken`` (after a :meth:`sync`)."""
        self.seen = _mark(taken)

    def pick(
        self,
        taken: dict[str, Any],
        base: str,
        *,
        numbered: bool = False,
        also: Container[str] = (),
    ) -> str:
        """The first name in neither ``taken`` nor ``also``: ``base``, ``base-2``...; or
        ``base-1``, ``base-2``... if ``numbered``."""
        self.sync(taken)
        i = self.resume.get((base, numbered))
        if i is None:
            if not numbered and base not in taken and base not in also:
                return base
            i = 1 if numbered else 2
        while f"{base}-{i}" in taken or f"{base}-{i}" in also:
            i += 1
        self.resume[(base, numbered)] = i
        return f"{base}-{i}"


def _mark(taken: dict[str, Any]) -> tuple[int, object]:
    # dicts keep insertion order: a key removed and another added changes the last key
    return len(taken), next(reversed(taken.keys()), None)
