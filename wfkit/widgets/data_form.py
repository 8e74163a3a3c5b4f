"""``DataForm``: the input form of a run, generated from the workflow's data model.

One input per field of the pydantic model: a text box for text (and dates, ids, anything pydantic
parses from a string), a number box for numbers with a default, a checkbox for ``bool``, a
dropdown for an enum or ``Literal``, and a JSON text area for nested models, lists, mappings and
types it does not know. Defaults are filled in; required fields are marked ``*`` and a blank one
is left out, so the model reports it. A workflow without a model gets one JSON text area.
:meth:`DataForm.read` gives the document, or raises :class:`~wfkit.widgets.forms.FormError`
with one readable line per problem (:func:`~wfkit.definition.field_errors.field_errors`).

CSS hooks: ``wfkit-data-form``, each input ``wfkit-data-field`` and ``wfkit-data-field-<name>``,
``wfkit-data-json`` (the whole document's text area when there is no model),
``wfkit-data-form-error``.
"""

from __future__ import annotations

import html
import json
import typing
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import ipywidgets as w
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from wfkit.definition.field_errors import field_errors
from wfkit.widgets.confirm import css_token
from wfkit.widgets.forms import FormError, member_types

__all__ = ["DataField", "DataForm", "data_field"]

Input = Literal["text", "int", "float", "number", "bool", "choice", "json"]

_STYLE = {"description_width": "9em"}
_LAYOUT = {"width": "100%", "max_width": "34em"}
_TEXT_TYPES = ("str", "datetime", "date", "time", "timedelta", "UUID", "Decimal", "Path")


@dataclass(frozen=True)
class DataField:
    """How one field of a data model is asked for."""

    name: str  # the key written into the document (the field's alias where it has one)
    input: Input
    required: bool
    optional: bool  # None is allowed: a blank input means None
    default: Any = None  # the default's JSON form (PydanticUndefined: none)
    choices: tuple[Any, ...] = ()
    description: str = ""


def _input_of(members: list[Any]) -> tuple[Input, tuple[Any, ...]]:
    if len(members) != 1:
        return "json", ()
    (only,) = members
    if only is bool:
        return "bool", ()
    if only is int or only is float:
        return ("int" if only is int else "float"), ()
    if isinstance(only, type) and issubclass(only, Enum):
        return "choice", tuple(m.value for m in only)
    if typing.get_origin(only) is Literal:
        return "choice", typing.get_args(only)
    if isinstance(only, type) and only.__name__ in _TEXT_TYPES:
        return "text", ()
    return "json", ()


def data_field(name: str, field: FieldInfo) -> DataField:
    """Describe the input for ``field`` (named ``name``) of a data model.

    Examples
    --------
    >>> from pydantic import BaseModel
    >>> class Order(BaseModel):
    ...     amount: float
    ...     express: bool = False
    >>> [data_field(n, f).input for n, f in Order.model_fields.items()]
    ['number', 'bool']
    """
    members, optional = member_types(field.annotation)
    kind, choices = _input_of(members)
    required = field.is_required()
    default: Any = PydanticUndefined
    if not required:
        value = field.get_default(call_default_factory=True)
        default = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        if isinstance(default, Enum):
            default = default.value
    if kind in ("int", "float") and (optional or required):
        kind = "number"  # a number box cannot be blank, and blank means "none" or "missing"
    return DataField(
        field.alias or name, kind, required, optional, default, choices, field.description or ""
    )


_NONE = "(none)"


def _widget(spec: DataField) -> w.ValueWidget:
    label = f"{spec.name} *" if spec.required else spec.name
    common: dict[str, Any] = {
        "description": label,
        "description_allow_html": False,
        "tooltip": spec.description or ("required" if spec.required else ""),
        "style": _STYLE,
        "layout": dict(_LAYOUT),
    }
    has_default = spec.default is not PydanticUndefined
    if spec.input == "bool":
        return w.Checkbox(value=bool(spec.default) if has_default else False, **common)
    if spec.input == "int":
        return w.IntText(value=int(spec.default or 0), **common)
    if spec.input == "float":
        return w.FloatText(value=float(spec.default or 0.0), **common)
    if spec.input == "choice":
        options: list[Any] = [(str(c), c) for c in spec.choices]
        if spec.optional:
            options.insert(0, (_NONE, None))
        value = spec.default if has_default else None
        return w.Dropdown(options=options, value=value, **common)
    text = "" if not has_default or spec.default is None else spec.default
    if spec.input == "json":
        shown = "" if text == "" else json.dumps(text, ensure_ascii=False, default=str)
        placeholder = "JSON, e.g. " + ('{"field": "value"}' if spec.required else "null")
        return w.Textarea(value=shown, placeholder=placeholder, rows=3, **common)
    hint = {"number": "a number", "text": spec.description}.get(spec.input, "")
    if spec.required:
        hint = f"{hint} (required)".strip()
    elif spec.optional:
        hint = f"{hint} (blank: none)".strip()
    return w.Text(value=str(text), placeholder=hint, **common)


class DataForm(w.VBox):
    """The input form of a run of a workflow whose data model is ``model`` (None: JSON).

    Examples
    --------
    >>> from typing import Literal
    >>> from pydantic import BaseModel
    >>> class Order(BaseModel):
    ...     customer: str
    ...     amount: float
    ...     priority: Literal["low", "high"] = "low"
    >>> form = DataForm(Order)
    >>> form.inputs["customer"].value, form.inputs["amount"].value = "c-1", "12.5"
    >>> form.read()
    {'customer': 'c-1', 'amount': 12.5, 'priority': 'low'}
    """

    def __init__(self, model: type[BaseModel] | None = None) -> None:
        self.model = model
        self.fields: dict[str, DataField] = {}
        self.inputs: dict[str, w.ValueWidget] = {}
        if model is None:
            self.json = w.Textarea(
                value="{}",
                description="data (JSON)",
                placeholder='{"field": "value"}',
                rows=5,
                style=_STYLE,
                layout=dict(_LAYOUT),
            )
            self.json.add_class("wfkit-data-json")
            children: list[Any] = [self.json]
        else:
            for name, field in model.model_fields.items():
                spec = data_field(name, field)
                box = _widget(spec)
                box.add_class("wfkit-data-field")
                box.add_class(f"wfkit-data-field-{css_token(spec.name)}")
                self.fields[spec.name], self.inputs[spec.name] = spec, box
            legend = w.HTML(
                f"<small>Data of a run: fits <code>{html.escape(model.__name__)}</code>; "
                "* marks a required field.</small>"
            )
            children = [legend, *self.inputs.values()]
        self.error = w.HTML()
        self.error.add_class("wfkit-data-form-error")
        self.error_lines: list[str] = []
        super().__init__([*children, self.error], layout={"width": "100%"})
        self.add_class("wfkit-data-form")

    def read(self) -> dict[str, Any]:
        """The document the inputs describe; :class:`FormError` (and shown in the form) when a
        value cannot be read or the document does not fit the model."""
        try:
            document = self._document()
            if self.model is not None:
                try:
                    self.model.model_validate(document)
                except ValidationError as exc:
                    raise FormError(field_errors(exc, self.model)) from None
        except FormError as exc:
            self.show_error(exc.lines)
            raise
        self.show_error([])
        return document

    def show_error(self, lines: list[str]) -> None:
        """Show ``lines`` under the form (one problem each); an empty list hides them."""
        self.error_lines = list(lines)
        items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        self.error.value = (
            '<div style="color:var(--jp-error-color1, #c62828)">'
            f'<ul style="margin:0.2em 0;padding-left:1.2em">{items}</ul></div>'
            if lines
            else ""
        )

    def _document(self) -> dict[str, Any]:
        if self.model is None:
            value = _json(self.json.value, "data") if self.json.value.strip() else {}
            if not isinstance(value, dict):
                raise FormError(
                    f'data: a run\'s data is a JSON object like {{"field": "value"}}, '
                    f"not {type(value).__name__}"
                )
            return value
        document: dict[str, Any] = {}
        errors: list[str] = []
        for name, spec in self.fields.items():
            try:
                value = _value(spec, self.inputs[name].value)
            except FormError as exc:
                errors += exc.lines
                continue
            if value is not _LEFT_OUT:
                document[name] = value
        if errors:
            raise FormError(errors)
        return document


_LEFT_OUT = object()


def _value(spec: DataField, raw: Any) -> Any:
    if spec.input in ("bool", "int", "float"):
        return raw
    if spec.input == "choice":
        return _LEFT_OUT if raw is None and not spec.optional else raw
    text = str(raw).strip()
    if not text:
        if spec.optional:
            return None
        if spec.required or spec.input != "text":
            return _LEFT_OUT  # the model reports a required field, or fills its default
        return ""
    if spec.input == "number":
        try:
            return int(text) if text.lstrip("+-").isdigit() else float(text)
        except ValueError:
            raise FormError(f"{spec.name}: {text!r} is not a number; type one like 12.5") from None
    if spec.input == "json":
        return _json(text, spec.name)
    return text


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormError(
            f"{name}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}); write "
            'e.g. {"field": "value"}, ["a", "b"], 12 or "text"'
        ) from None
