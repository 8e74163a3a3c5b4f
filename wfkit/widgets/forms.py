"""Forms generated from pydantic models: one input per field, values parsed back to plain data.

A field's annotation picks its input: ``bool`` a checkbox, ``int``/``float`` a number box, an
enum or ``Literal`` a dropdown; everything else (text, durations, lists, mappings, optional
numbers) a text box whose content is parsed (``"90s"``, ``a, b`` or a JSON list, a JSON object).
The values read back are plain data for the model to validate, so the model stays the judge.
"""

from __future__ import annotations

import html
import json
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any, Literal

import ipywidgets as w
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from wfkit.definition import keys
from wfkit.definition.durations import format_duration
from wfkit.definition.field_errors import field_errors
from wfkit.definition.kind_spec import ActivityUse, KindSpec
from wfkit.definition.kinds import DEFAULT_KIND, KINDS, Node, NodeKind
from wfkit.definition.policy import Policy

__all__ = [
    "FieldSpec",
    "FormError",
    "ModelForm",
    "NodeForm",
    "explain",
    "field_spec",
    "format_value",
    "parse_value",
    "policy_fields",
    "validate_node",
]

Shape = Literal["bool", "int", "float", "choice", "duration", "list", "mapping", "number", "text"]

_STYLE = {"description_width": "10em"}
_LAYOUT = {"width": "100%", "max_width": "30em"}
_NONE = "(none)"


class FormError(ValueError):
    """A form value that cannot be read or does not fit its model; ``lines`` holds one line per
    problem, each naming its field; the message joins them with ``"; "``."""

    def __init__(self, lines: str | Sequence[str]) -> None:
        self.lines = [lines] if isinstance(lines, str) else list(lines)
        super().__init__("; ".join(self.lines))


@dataclass(frozen=True)
class FieldSpec:
    """How one model field is shown and read."""

    name: str
    shape: Shape
    optional: bool = False
    choices: tuple[str, ...] = ()
    default: Any = None
    description: str = ""


def member_types(annotation: Any) -> tuple[list[Any], bool]:
    """The member types of ``annotation`` (Annotated stripped) and whether ``None`` is one."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return member_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        members: list[Any] = []
        optional = False
        for arg in typing.get_args(annotation):
            inner, none = member_types(arg)
            members += inner
            optional = optional or none
        return members, optional
    if annotation is type(None):
        return [], True
    return [annotation], False


def _shape(members: list[Any]) -> tuple[Shape, tuple[str, ...]]:
    if len(members) != 1:
        return (
            ("mapping", ()) if any(typing.get_origin(m) is dict for m in members) else ("text", ())
        )
    (only,) = members
    origin = typing.get_origin(only)
    if only is bool:
        return "bool", ()
    if only in (int, float):
        return ("int" if only is int else "float"), ()
    if isinstance(only, type) and issubclass(only, Enum):
        return "choice", tuple(str(m.value) for m in only)
    if origin is Literal:
        return "choice", tuple(str(a) for a in typing.get_args(only))
    if only is timedelta:
        return "duration", ()
    if origin in (tuple, list):
        return "list", ()
    if origin is dict:
        return "mapping", ()
    return "text", ()


def field_spec(name: str, field: FieldInfo) -> FieldSpec:
    """Describe the input for ``field`` of a pydantic model."""
    members, optional = member_types(field.annotation)
    shape, choices = _shape(members)
    if optional and shape in ("int", "float"):
        shape = "number"  # a number box cannot be blank, and blank means None here
    default = None if field.default is PydanticUndefined else field.default
    return FieldSpec(name, shape, optional, choices, default, field.description or "")


def format_value(spec: FieldSpec, value: Any) -> Any:
    """The input's value for the plain (or model) ``value`` of the field."""
    if isinstance(value, Enum):
        value = value.value
    if spec.shape == "bool":
        return bool(value)
    if spec.shape in ("int", "float"):
        return value if isinstance(value, int | float) else (spec.default or 0)
    if spec.shape == "choice":
        return str(value) if value is not None else (_NONE if spec.optional else spec.choices[0])
    if value is None:
        return ""
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, list | tuple):
        items = [str(v) for v in value]
        return ", ".join(items) if all("," not in i for i in items) else json.dumps(items)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def parse_value(spec: FieldSpec, raw: Any) -> Any:
    """Plain data for the model from the input's value ``raw``; raises :class:`FormError`."""
    if spec.shape in ("bool", "int", "float"):
        return raw
    if spec.shape == "choice":
        return None if raw == _NONE else raw
    text = str(raw).strip()
    if not text and (spec.optional or spec.shape in ("list", "mapping")):
        return None if spec.optional else ([] if spec.shape == "list" else {})
    if spec.shape == "number":
        try:
            return float(text) if "." in text else int(text)
        except ValueError:
            raise FormError(
                f"{spec.name}: {text!r} is not a number; type one or leave it blank"
            ) from None
    if spec.shape == "list":
        if text.startswith("["):
            return _json(spec, text, 'a JSON list like ["a", "b"]')
        return [part.strip() for part in text.split(",") if part.strip()]
    if spec.shape == "mapping" and text.startswith("{"):
        return _json(spec, text, 'a JSON object like {"field": "value"}')
    return text


def _json(spec: FieldSpec, text: str, example: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FormError(f"{spec.name}: not valid JSON ({exc.msg}); write {example}") from None


def _input(spec: FieldSpec) -> w.ValueWidget:
    common: dict[str, Any] = {
        "description": spec.name,
        "tooltip": spec.description,
        "style": _STYLE,
        "layout": _LAYOUT,
    }
    if spec.shape == "bool":
        return w.Checkbox(value=False, indent=True, **common)
    if spec.shape == "int":
        return w.IntText(value=0, **common)
    if spec.shape == "float":
        return w.FloatText(value=0.0, **common)
    if spec.shape == "choice":
        options = ([_NONE] if spec.optional else []) + list(spec.choices)
        return w.Dropdown(options=options, **common)
    hints = {
        "duration": "e.g. 90s, 7d, 1h30m",
        "list": "a, b (or a JSON list)",
        "mapping": "name, or a JSON object",
        "number": "a number",
    }
    placeholder = hints.get(spec.shape, spec.description)
    if spec.optional:
        placeholder = f"{placeholder} (blank: none)".strip()
    return w.Text(value="", placeholder=placeholder, **common)


class ModelForm(w.VBox):
    """One input per field of ``model``; :meth:`load` fills them, :meth:`read` parses them.

    Examples
    --------
    >>> from wfkit.definition.kinds import JoinConfig
    >>> form = ModelForm(JoinConfig)
    >>> form.load({"fork": "parallel-1", "mode": "at_least", "count": 2})
    >>> form.read()
    {'fork': 'parallel-1', 'mode': 'at_least', 'count': 2}
    """

    def __init__(self, model: type[BaseModel], **kwargs: Any) -> None:
        self.model = model
        self.specs = {name: field_spec(name, f) for name, f in model.model_fields.items()}
        self.inputs = {name: _input(spec) for name, spec in self.specs.items()}
        self.visible: tuple[str, ...] = tuple(self.specs)
        super().__init__(children=list(self.inputs.values()), **kwargs)
        self.add_class("wfkit-model-form")

    def show_only(self, names: Iterable[str]) -> None:
        """Show (and :meth:`read`) only the fields ``names``, in the model's order."""
        wanted = set(names)
        self.visible = tuple(n for n in self.specs if n in wanted)
        for name, box in self.inputs.items():
            box.layout.display = None if name in wanted else "none"

    def load(self, values: Mapping[str, Any]) -> None:
        """Show ``values`` (plain or model data); missing fields show their default."""
        for name, spec in self.specs.items():
            value = values.get(name, spec.default)
            self.inputs[name].value = format_value(spec, value)

    def read(self) -> dict[str, Any]:
        """Every field's value as plain data; :class:`FormError` lists every unreadable one."""
        values: dict[str, Any] = {}
        errors: list[str] = []
        for name in self.visible:
            spec = self.specs[name]
            try:
                values[name] = parse_value(spec, self.inputs[name].value)
            except FormError as exc:
                errors += exc.lines
        if errors:
            raise FormError(errors)
        return values


def policy_fields(kind: NodeKind | str) -> tuple[str, ...]:
    """The policy fields that mean something for a node of ``kind``.

    Retries (``max_attempts``, delays, ``attempt_timeout``) apply to steps that run an activity;
    ``max_visits`` (loops) and ``on_failure`` (a step that fails for good, docs/semantics.md
    §5.1) to every node a token passes through; start and end take none. The kind's entry in
    :data:`~wfkit.definition.kinds.KINDS` says which (its ``policy``).

    Examples
    --------
    >>> policy_fields("approval")
    ('max_visits', 'on_failure')
    """
    return KINDS[NodeKind(kind)].policy.fields()


def explain(exc: ValidationError, prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """A pydantic error as readable lines joined by ``"; "`` (see
    :func:`~wfkit.definition.field_errors.field_errors`)."""
    return "; ".join(field_errors(exc, model, prefix))


def validate_node(attrs: Mapping[str, Any]) -> Node:
    """Validate plain node attributes; :class:`FormError` names each bad field."""
    try:
        kind = NodeKind(str(attrs.get(keys.KIND)))
    except ValueError:
        kinds = ", ".join(k.value for k in NodeKind)
        raise FormError(
            f"kind {attrs.get(keys.KIND)!r} is not a node kind; use one of {kinds}"
        ) from None
    errors: list[str] = []
    for key, model, prefix in (
        (keys.CONFIG, KINDS[kind].config, ""),  # config fields are named as the form labels them
        (keys.POLICY, Policy, "policy"),
    ):
        try:
            model.model_validate(attrs.get(key) or {})
        except ValidationError as exc:
            errors += field_errors(exc, model, prefix)
    if errors:  # field-level messages read better than the Node model's nested one
        raise FormError(errors)
    try:
        return Node.model_validate(dict(attrs))
    except ValidationError as exc:
        raise FormError(field_errors(exc, Node)) from None


class NodeForm(w.VBox):
    """The property form of one node: kind, label, and the fields that kind takes.

    What the kind's entry in :data:`~wfkit.definition.kinds.KINDS` says it takes: an activity
    (``activity``), a compensation (``compensable``), the fields of its config model (``config``)
    and the policy fields of :func:`policy_fields`; a field the kind does not
    take is hidden unless the node holds a value for it (then it shows, so it can be cleared).
    :meth:`show` fills it from a node's attributes; :meth:`read` gives the edited attributes
    (plain data, not yet validated; attributes and policy fields the form does not show are
    kept).
    """

    def __init__(self, activities: Iterable[str] = ()) -> None:
        names = sorted(activities)
        self.node_id: str | None = None
        self.shown: dict[str, Any] = {}
        self.title = w.HTML()
        self.kind = w.Dropdown(
            options=[k.value for k in NodeKind], description="kind", style=_STYLE, layout=_LAYOUT
        )
        self.activity = self._combobox("activity", names)
        self.label = w.Text(description="label", style=_STYLE, layout=_LAYOUT)
        self.config = w.VBox()
        self.policy = ModelForm(Policy)
        self.compensation = self._combobox("compensation", names)
        self.apply_button = w.Button(description="Apply", button_style="primary", icon="check")
        self.error = w.HTML()
        self.error_lines: list[str] = []
        self._loading = False
        self._configs: dict[NodeKind, ModelForm] = {}
        self.policy_box = w.Accordion(
            children=[self.policy],
            titles=("policy",),
            layout={"width": "100%", "max_width": "30em"},
        )
        self.fields = w.VBox(
            [self.kind, self.activity, self.label, self.config, self.policy_box, self.compensation]
        )
        super().__init__([self.title, self.fields, w.HBox([self.apply_button]), self.error])
        self.add_class("wfkit-node-form")
        for name in ("kind", "activity", "label", "compensation"):  # hooks for page tests
            getattr(self, name).add_class(f"wfkit-form-{name}")
        self.config.add_class("wfkit-form-config")
        self.policy.add_class("wfkit-form-policy")
        self.kind.observe(self._on_kind, "value")
        self.clear()

    @staticmethod
    def _combobox(name: str, options: list[str]) -> w.Combobox:
        return w.Combobox(
            options=options,
            ensure_option=False,
            description=name,
            placeholder="registered activity name",
            style=_STYLE,
            layout=_LAYOUT,
        )

    def set_activities(self, names: Iterable[str]) -> None:
        """Offer ``names`` in the activity and compensation boxes (free text stays allowed)."""
        options = sorted(names)
        for box in (self.activity, self.compensation):
            if list(box.options) != options:
                box.options = options

    def clear(self) -> None:
        """Show no node."""
        self.node_id, self.shown = None, {}
        self.title.value = "<i>Select a node on the graph to edit its properties.</i>"
        self.fields.layout.display = "none"
        self.apply_button.disabled = True
        self.show_error("")

    def show(self, node_id: str, attrs: Mapping[str, Any]) -> None:
        """Fill the form from ``attrs``, the attributes of node ``node_id``."""
        self.node_id, self.shown = node_id, dict(attrs)
        self.title.value = f"<b>Node</b> <code>{html.escape(node_id)}</code>"
        self.fields.layout.display = None
        self.apply_button.disabled = False
        kind = attrs.get(keys.KIND)
        known = kind in {k.value for k in NodeKind}
        self.show_error("" if known else f"kind {kind!r} is not a node kind; pick one and Apply")
        self._loading = True  # the node's own values, not a kind change: clear nothing
        try:
            self.kind.value = kind if known else DEFAULT_KIND.value
        finally:
            self._loading = False
        self.activity.value = str(attrs.get(keys.ACTIVITY) or "")
        self.label.value = str(attrs.get(keys.LABEL) or "")
        self.compensation.value = str(attrs.get(keys.COMPENSATION) or "")
        policy = attrs.get(keys.POLICY)
        self.policy.load(policy if isinstance(policy, Mapping) else {})
        self._show_kind(NodeKind(self.kind.value))

    def show_error(self, text: str | Sequence[str]) -> None:
        """Show ``text`` (one line, or a line per problem) as the form's inline error; empty
        hides it."""
        lines = [text] if isinstance(text, str) else list(text)
        lines = [line for line in lines if line]
        self.error_lines = lines
        items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
        self.error.value = (
            '<div class="wfkit-form-error" style="color:var(--jp-error-color1, #cc0000)">'
            f'<ul style="margin:0.2em 0;padding-left:1.2em">{items}</ul></div>'
            if lines
            else ""
        )

    def read(self) -> dict[str, Any]:
        """The edited attributes as plain data; :class:`FormError` when a field is unreadable."""
        kind = NodeKind(self.kind.value)
        errors: list[str] = []
        parts: dict[str, Any] = {}
        for key, form in ((keys.CONFIG, self._config_form(kind)), (keys.POLICY, self.policy)):
            try:
                parts[key] = form.read()
            except FormError as exc:
                errors += [f"policy.{line}" if key == keys.POLICY else line for line in exc.lines]
        if errors:
            raise FormError(errors)
        stored = self.shown.get(keys.POLICY)
        hidden = {
            k: v
            for k, v in (stored.items() if isinstance(stored, Mapping) else ())
            if k not in self.policy.visible
        }
        parts[keys.POLICY] = {**hidden, **parts[keys.POLICY]}
        attrs = {k: v for k, v in self.shown.items() if k not in _FORM_KEYS}
        attrs.update(
            {
                keys.KIND: kind.value,
                keys.ACTIVITY: self._shown_value(self.activity),
                keys.LABEL: self.label.value.strip() or None,
                keys.COMPENSATION: self._shown_value(self.compensation),
                **parts,
            }
        )
        return {k: v for k, v in attrs.items() if v is not None}

    @staticmethod
    def _shown_value(box: w.Combobox) -> str | None:
        return (box.value.strip() or None) if box.layout.display != "none" else None

    def _config_form(self, kind: NodeKind) -> ModelForm:
        if kind not in self._configs:
            self._configs[kind] = ModelForm(KINDS[kind].config)
        return self._configs[kind]

    def _show_kind(self, kind: NodeKind) -> None:
        """Show the fields ``kind`` takes, and any other field the shown node holds a value in."""
        form = self._config_form(kind)
        stored = self.shown.get(keys.CONFIG)
        form.load(stored if isinstance(stored, Mapping) else {})
        self.config.children = [form] if form.specs else []
        spec = KINDS[kind]
        for box, takes in (
            (self.activity, _takes_activity(spec)),
            (self.compensation, spec.compensable),
        ):
            box.layout.display = None if takes or box.value.strip() else "none"
        policy = self.shown.get(keys.POLICY)
        held = set(policy) if isinstance(policy, Mapping) else set()
        self.policy.show_only({*policy_fields(kind), *(held & set(self.policy.specs))})
        self.policy_box.layout.display = None if self.policy.visible else "none"

    def _on_kind(self, change: dict[str, Any]) -> None:
        if self._loading:
            return
        kind = NodeKind(change["new"])
        if not _takes_activity(KINDS[kind]):
            self.activity.value = ""
        if not KINDS[kind].compensable:
            self.compensation.value = ""
        self._show_kind(kind)


def _takes_activity(spec: KindSpec) -> bool:
    return spec.activity is not ActivityUse.NONE


_FORM_KEYS = (
    keys.KIND,
    keys.ACTIVITY,
    keys.LABEL,
    keys.CONFIG,
    keys.POLICY,
    keys.COMPENSATION,
)
