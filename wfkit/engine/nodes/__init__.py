"""Node semantics, one module per family; each registers a handler for its kinds.

Adding a node kind means adding a module here, not editing a chain of ``if kind == ...``: every
module of this package is imported below, and registers its handler with
:func:`~wfkit.engine.nodes.base.handles`. The handler interface is
:class:`~wfkit.engine.nodes.base.NodeHandler`; what the kind declares (config, outlets, drawing)
is its entry in :data:`wfkit.definition.kinds.KINDS`.
"""

from __future__ import annotations

import importlib
import pkgutil

from wfkit.engine.nodes.base import HANDLERS, NodeHandler, handles

__all__ = ["HANDLERS", "NodeHandler", "handles", "load_all"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")  # each registers its handler on import


def load_all() -> dict[str, NodeHandler]:
    """The handler of every node kind."""
    return HANDLERS
