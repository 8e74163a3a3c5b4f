"""``PublishBar``: the editor's way out: export the picture, register the graph as a new version.

CSS hooks: ``wfkit-editor-export-path``, ``wfkit-editor-export-svg``,
``wfkit-editor-export-png``, ``wfkit-editor-register``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from wfkit.definition import rendering
from wfkit.definition.problems import Problem
from wfkit.definition.workflow import Workflow
from wfkit.errors import WfkitError
from wfkit.widgets.confirm import Message

if TYPE_CHECKING:
    from wfkit.engine import Engine

__all__ = ["FORMATS", "PublishBar", "registered_version"]

FORMATS = ("svg", "png", "pdf")


def registered_version(engine: Engine, workflow_id: str) -> tuple[int | None, str | None]:
    """The latest version of ``workflow_id`` registered with ``engine`` and its content hash."""
    versions = engine.workflows().get(workflow_id)
    if not versions:
        return None, None
    latest = max(versions)
    return latest, engine.definition(workflow_id, latest).content_hash


def _button(description: str, css: str, icon: str) -> w.Button:
    button = w.Button(description=description, icon=icon, layout=w.Layout(width="auto"))
    button.add_class(css)
    return button


class PublishBar(w.HBox):
    """A file box with Export SVG / Export PNG, and (with an engine) "Register as version N".

    ``problems`` gives the problems to draw; outcomes go to the ``status`` line;
    ``on_registered`` runs after a successful registration.
    """

    def __init__(
        self,
        flow: Workflow,
        status: Message,
        problems: Callable[[], Sequence[Problem]],
        *,
        engine: Engine | None = None,
        on_registered: Callable[[], Any] = lambda: None,
    ) -> None:
        self.flow, self.engine, self.status = flow, engine, status
        self._problems, self._on_registered = problems, on_registered
        self.path = w.Text(  # grows with the row: a path is often longer than a default box
            value=f"{flow.id}.svg",
            description="file",
            style={"description_width": "auto"},
            layout={"flex": "1 1 40em", "min_width": "16em"},
        )
        self.path.add_class("wfkit-editor-export-path")
        self.svg_button = _button("Export SVG", "wfkit-editor-export-svg", "download")
        self.png_button = _button("Export PNG", "wfkit-editor-export-png", "download")
        self.register_button = _button("Register", "wfkit-editor-register", "upload")
        self.register_button.layout.display = None if engine is not None else "none"
        self.svg_button.on_click(lambda _b: self.export("svg"))
        self.png_button.on_click(lambda _b: self.export("png"))
        self.register_button.on_click(lambda _b: self.register())
        super().__init__([self.path, self.svg_button, self.png_button, self.register_button])

    def export(self, fmt: str) -> Path | None:
        """Write the picture as ``fmt`` (svg, png or pdf) to the path in the file box."""
        if fmt not in FORMATS:
            self.status.error(f"cannot export as {fmt!r}: use svg, png or pdf")
            return None
        path = Path(self.path.value.strip() or f"{self.flow.id}.{fmt}").expanduser()
        if path.suffix.lower().lstrip(".") in FORMATS:
            path = path.with_suffix(f".{fmt}")
        else:
            path = path.with_name(f"{path.name}.{fmt}")
        title = f"{self.flow.id} v{self.flow.version}"
        try:  # what flow.render does, with the editor's problems (its registry may differ)
            written = rendering.render(
                self.flow.graph, path, format=fmt, problems=self._problems(), title=title
            )
        except (WfkitError, OSError) as exc:
            self.status.error(f"Could not write {str(path)!r}: {exc}")
            return None
        self.status.ok(f"Wrote {written} ({written.stat().st_size} bytes).")
        return written

    def sync(self) -> None:
        """Name the version "Register" would create; disable it when nothing changed."""
        if self.engine is None:
            return
        latest, digest = registered_version(self.engine, self.flow.id)
        target = latest + 1 if latest else self.flow.version
        same = digest == self.flow.content_hash
        self.register_button.description = f"Register as version {target}"
        self.register_button.disabled = same
        self.register_button.tooltip = (
            f"the graph equals registered v{latest}; change it to register a new version"
            if same
            else f"register this graph with the engine as {self.flow.id!r} v{target}"
        )

    def register(self) -> int | None:
        """Register a copy of the workflow as the next version; the workflow takes that number.

        So what the editor holds and what the engine runs under that version agree. Returns the
        version registered, or None (and says why) when refused.
        """
        if self.engine is None:
            self.status.error("No engine: create the editor with Editor(flow, engine=engine).")
            return None
        latest, _ = registered_version(self.engine, self.flow.id)
        version = latest + 1 if latest else self.flow.version
        try:
            self.engine.register(self.flow.copy(version=version))
        except WfkitError as exc:
            self.status.error(f"Not registered: {exc}")
            return None
        self.flow.version = version
        self._on_registered()
        self.status.ok(
            f"Registered {self.flow.id!r} v{version} ({self.flow.content_hash[:12]}); "
            f"engine.start({self.flow.id!r}, data) now runs it."
        )
        return version
