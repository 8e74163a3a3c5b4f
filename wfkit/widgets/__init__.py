"""Widgets for the notebook: the graph editor and the operating widgets.

``RunMonitor`` watches one run live, ``Inbox`` answers waits and approvals, ``Recovery`` repairs
failed and suspended runs, ``Dashboard`` puts them in tabs over a run table, ``GraphSurface`` is
the clickable Graphviz picture they draw on, ``Editor`` edits a workflow graph, and
``WorkerStatus`` says when runs have work ready and no worker runs in this kernel (with a Start
workers button).

Import it as ``import wfkit.widgets`` (or ``from wfkit.widgets import Dashboard``); widgets call
only the engine's API, never the store.
"""

from __future__ import annotations

from wfkit.widgets.dashboard import Dashboard
from wfkit.widgets.editor import Editor
from wfkit.widgets.inbox import Inbox
from wfkit.widgets.monitor import RunMonitor
from wfkit.widgets.recovery import Recovery
from wfkit.widgets.surface import GraphSurface
from wfkit.widgets.workers import WorkerStatus

__all__ = ["Dashboard", "Editor", "GraphSurface", "Inbox", "Recovery", "RunMonitor", "WorkerStatus"]
