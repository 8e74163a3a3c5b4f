"""Static pictures saved next to a widget view, for a notebook opened without its kernel.

A widget view is only a reference to a model that lives in the kernel: reopened without it (or
shown on a code-hosting site) JupyterLab writes "Error displaying widget: model not found" where
the view was, whatever else the output's mimebundle holds (its widget renderer ranks first and
has no fallback). So :class:`StaticPicture` displays a second output after the view: the graph
picture as it stands (run status included), as ``text/html``, kept up to date through a display
id while the kernel runs, and hidden by the live view's style sheet (``data-wfkit-fallback``)
so that a live notebook shows the picture once.

A widget that contains a :class:`~wfkit.widgets.surface.GraphSurface` gets this by listing the
mixin first among its bases: ``class Editor(StaticPicture, widgets.VBox)``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

__all__ = ["StaticPicture", "find_surface"]


class _Surface(Protocol):
    fallback_key: str

    def static_html(self) -> str: ...

    def _keep_displayed(self, handle: Any) -> None: ...


def find_surface(widget: Any) -> _Surface | None:
    """The first graph surface in ``widget`` (itself, its ``surface``, or down its children)."""
    from wfkit.widgets.surface import GraphSurface

    queue: deque[Any] = deque([widget])
    seen: set[int] = set()
    while queue:
        item = queue.popleft()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, GraphSurface):
            return item
        own = getattr(item, "surface", None)
        if isinstance(own, GraphSurface):
            return own
        queue.extend(getattr(item, "children", ()) or ())
    return None


class StaticPicture:
    """Mixin for a widget showing a graph: its display also saves a static copy of the picture.

    Examples
    --------
    >>> import wfkit as wf
    >>> from wfkit.widgets import GraphSurface
    >>> surface = GraphSurface()
    >>> surface.draw(wf.Workflow("hello").start_with("docs.greet").graph)
    >>> [sorted(bundle) for bundle in surface.display_bundles()]
    [['application/vnd.jupyter.widget-view+json', 'text/plain'], ['text/html']]
    """

    def display_bundles(self) -> list[dict[str, Any]]:
        """What displaying the widget shows: the widget view's mimebundle, then the static
        picture (``text/html``) when it holds a drawn graph."""
        view: Any = self._repr_mimebundle_()  # type: ignore[attr-defined]
        if isinstance(view, tuple):  # anywidget answers (data, metadata)
            view = view[0]
        surface = find_surface(self)
        picture = surface.static_html() if surface is not None else ""
        view = dict(view)
        return [view, {"text/html": picture}] if picture else [view]

    def _ipython_display_(self) -> None:
        from IPython.display import display

        bundles = self.display_bundles()
        display(bundles[0], raw=True)
        if len(bundles) > 1:
            handle = display(bundles[1], raw=True, display_id=True)
            surface = find_surface(self)
            if surface is not None and handle is not None:
                surface._keep_displayed(handle)
