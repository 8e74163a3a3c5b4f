"""Shared pieces of the operating widgets: the actor field, a yes/no confirmation bar, messages.

Every action an operator takes from a widget is recorded with an actor; :func:`actor_field`
gives the text field that names them (the OS user by default). Actions that change a run ask
first through a :class:`Confirm` bar: "Really cancel run 3f2a...? [Yes] [No]" — only Yes acts.
"""

from __future__ import annotations

import getpass
import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

__all__ = ["BORDER", "Confirm", "Message", "actor_field", "css_token", "default_actor", "fit"]


BORDER = "1px solid var(--jp-border-color2, #dddddd)"
"""The line between rows of the operating widgets, in the front end's theme."""


def fit(**more: str) -> widgets.Layout:
    """A layout as wide as its content (a button's whole label), never shrunk below it."""
    return widgets.Layout(width="auto", flex="0 0 auto", **more)


def default_actor() -> str:
    """The OS user name, or ``"operator"`` where the OS cannot tell.

    Examples
    --------
    >>> isinstance(default_actor(), str) and default_actor() != ""
    True
    """
    try:
        return getpass.getuser() or "operator"
    except (OSError, KeyError, ImportError):  # no passwd entry, no USER variable
        return "operator"


def actor_field(actor: str | None = None) -> widgets.Text:
    """The "actor" text field (CSS class ``wfkit-actor``), filled with ``actor`` or the OS user."""
    field = widgets.Text(
        value=actor if actor is not None else default_actor(),
        description="actor",
        placeholder="who is acting (recorded with every action)",
    )
    field.add_class("wfkit-actor")
    return field


def css_token(text: str) -> str:
    """``text`` made safe as part of a CSS class name (anything but ``[A-Za-z0-9_-]`` becomes
    ``_``).

    Examples
    --------
    >>> css_token("docs.review 1")
    'docs_review_1'
    """
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in text)


class Message(widgets.HTML):
    """A one-line outcome: ``ok(text)`` in green, ``error(text)`` in red, ``clear()``.

    The kind is also a CSS class (``wfkit-ok`` / ``wfkit-error``), so tests can tell them apart.
    """

    def __init__(self, css_class: str) -> None:
        super().__init__(value="")
        self.add_class("wfkit-message")
        self.add_class(css_class)
        self.text = ""
        self.kind = ""

    def ok(self, text: str) -> None:
        """Show a success."""
        self._show(text, "ok", "var(--jp-success-color1, #2e7d32)")

    def error(self, text: str) -> None:
        """Show an error."""
        self._show(text, "error", "var(--jp-error-color1, #c62828)")

    def clear(self) -> None:
        """Show nothing."""
        self._set_kind("")
        self.text = ""
        self.value = ""

    def _show(self, text: str, kind: str, colour: str) -> None:
        self._set_kind(kind)
        self.text = text
        self.value = (
            f'<span style="color:{colour};white-space:pre-wrap;overflow-wrap:break-word">'
            f"{html.escape(text)}</span>"
        )

    def _set_kind(self, kind: str) -> None:
        if self.kind:
            self.remove_class(f"wfkit-{self.kind}")
        if kind:
            self.add_class(f"wfkit-{kind}")
        self.kind = kind


class Confirm(widgets.HBox):
    """A hidden yes/no bar: :meth:`ask` shows the question, only Yes runs the action.

    CSS hooks: ``wfkit-confirm`` (the bar), ``wfkit-confirm-question``, ``wfkit-confirm-yes``,
    ``wfkit-confirm-no``. A new :meth:`ask` replaces a pending one.

    Examples
    --------
    >>> done = []
    >>> bar = Confirm()
    >>> bar.ask("Really cancel run r1?", lambda: done.append("cancel"))
    >>> bar.pending
    'Really cancel run r1?'
    >>> bar.no_button.click()
    >>> done, bar.pending
    ([], None)
    >>> bar.ask("Really cancel run r1?", lambda: done.append("cancel"))
    >>> bar.yes_button.click()
    >>> done
    ['cancel']
    """

    def __init__(self) -> None:
        self.question = widgets.HTML(value="", layout=widgets.Layout(flex="1 1 260px"))
        self.question.add_class("wfkit-confirm-question")
        self.yes_button = widgets.Button(description="Yes", button_style="danger", layout=fit())
        self.yes_button.add_class("wfkit-confirm-yes")
        self.no_button = widgets.Button(description="No", layout=fit())
        self.no_button.add_class("wfkit-confirm-no")
        super().__init__(
            [self.question, self.yes_button, self.no_button],
            layout=widgets.Layout(
                display="none", align_items="center", flex_flow="row wrap", padding="2px 0"
            ),
        )
        self.add_class("wfkit-confirm")
        self.pending: str | None = None
        self.detail = ""  # the smaller text under the pending question
        self._action: Callable[[], Any] | None = None
        self.yes_button.on_click(lambda _b: self.yes())
        self.no_button.on_click(lambda _b: self.no())

    def ask(self, question: str, action: Callable[[], Any], detail: str = "") -> None:
        """Show ``question`` (and a smaller ``detail``); Yes calls ``action``, No forgets it."""
        self.pending = question
        self.detail = detail
        self._action = action
        extra = (
            f' <small style="color:var(--jp-ui-font-color2, #555)">{html.escape(detail)}</small>'
            if detail
            else ""
        )
        self.question.value = (
            '<span style="color:var(--jp-ui-font-color1, #222);overflow-wrap:break-word">'
            f"<b>{html.escape(question)}</b>{extra}</span>"
        )
        self.layout.display = "flex"

    def yes(self) -> None:
        """Run the pending action (if any) and hide the bar."""
        action = self._action
        self._reset()
        if action is not None:
            action()

    def no(self) -> None:
        """Forget the pending action and hide the bar."""
        self._reset()

    def _reset(self) -> None:
        self.pending = None
        self.detail = ""
        self._action = None
        self.question.value = ""
        self.layout.display = "none"
