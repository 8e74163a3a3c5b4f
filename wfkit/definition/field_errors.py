"""Pydantic validation errors in words a person reads: one line per problem, no links.

``1 validation error for DelayConfig duration Field required [type=missing...] For further
information visit https://errors.pydantic.dev/...`` becomes ``duration: required — e.g. 90s, 7d
or 1h30m``. The field is named as a form labels it (``policy.max_attempts`` with a prefix,
``branches item 2`` for a list entry); the hint comes from the field's schema (its examples, else
its description).
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = ["field_errors"]

_PLAIN = {
    "missing": "required",
    "string_too_short": "required (it is empty)",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_type": "must be text",
    "dict_type": 'must be a mapping, e.g. {"field": "value"}',
    "list_type": 'must be a list, e.g. ["a", "b"]',
    "tuple_type": 'must be a list, e.g. ["a", "b"]',
    "model_type": "must be an object with fields",
    "model_attributes_type": "must be an object with fields",
    "extra_forbidden": "is not a setting here; remove it",
}
_HINTED = {"missing", "string_too_short", "int_parsing", "float_parsing", "string_type"}


def field_errors(
    exc: ValidationError, model: type[BaseModel] | None = None, prefix: str = ""
) -> list[str]:
    """One readable line per error of ``exc``: ``field: what is wrong — hint``.

    Parameters
    ----------
    exc : pydantic.ValidationError
        The error to describe.
    model : pydantic model class, optional
        The model that raised it; its field examples and descriptions become hints.
    prefix : str
        Put before every field name (``"policy"`` gives ``policy.max_attempts``).

    Examples
    --------
    >>> from wfkit.definition.kinds import DelayConfig
    >>> try:
    ...     DelayConfig.model_validate({})
    ... except ValidationError as exc:
    ...     field_errors(exc, DelayConfig)
    ['duration: required — e.g. 90s, 7d or 1h30m']
    """
    lines = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        where = _where(prefix, loc)
        text = _what(err)
        hint = _hint(model, loc) if err.get("type") in _HINTED else ""
        line = f"{where}: {text}" if where else text
        lines.append(f"{line} — {hint}" if hint else line)
    return lines


def _where(prefix: str, loc: tuple[Any, ...]) -> str:
    parts = [prefix] if prefix else []
    for part in loc:
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]} item {part + 1}" if parts else f"item {part + 1}"]
        else:
            parts.append(str(part))
    return ".".join(parts)


def _what(err: Any) -> str:
    kind = str(err.get("type", ""))
    ctx = err.get("ctx") or {}
    msg = str(err.get("msg", "does not fit")).removeprefix("Value error, ")
    if kind in _PLAIN:
        text = _PLAIN[kind]
    elif kind in ("literal_error", "enum"):
        text = f"must be one of {ctx.get('expected', '')}".rstrip()
    elif kind == "too_short":
        count = ctx.get("min_length", 1)
        text = f"needs at least {count} item{'s' if count != 1 else ''}"
    elif kind == "too_long":
        text = f"takes at most {ctx.get('max_length')} items"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        words = {
            "greater_than_equal": "at least",
            "greater_than": "more than",
            "less_than_equal": "at most",
            "less_than": "less than",
        }[kind]
        bound = next(iter(ctx.values()), "")
        text = f"must be {words} {bound}"
    else:
        text = msg.replace("Input should be", "must be")
    if kind not in ("missing", "string_too_short", "value_error", "extra_forbidden") and (
        "input" in err
    ):
        shown = repr(err["input"])
        text += f" (got {shown[:60]}{'...' if len(shown) > 60 else ''})"
    return text


def _hint(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> str:
    names = [p for p in loc if isinstance(p, str)]
    while model is not None and names:
        name = names.pop(0)
        field = model.model_fields.get(name)
        if field is None:
            return ""
        if not names:
            return _field_hint(model, name)
        model = _nested_model(field.annotation)
    return ""


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


@cache
def _field_hint(model: type[BaseModel], name: str) -> str:
    try:
        schema = model.model_json_schema()["properties"][name]
    except Exception:  # a model whose schema cannot be generated simply gives no hint
        schema = {}
    examples = list(schema.get("examples") or [])
    for option in schema.get("anyOf") or []:
        examples += option.get("examples") or []
    if examples:
        shown = [str(e) for e in examples[:3]]
        listed = ", ".join(shown[:-1]) + f" or {shown[-1]}" if len(shown) > 1 else shown[0]
        return f"e.g. {listed}"
    return str(schema.get("description") or model.model_fields[name].description or "")
