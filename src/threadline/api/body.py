"""Request bodies and query strings into models, refusals into problems that name the field.

Malformed JSON is a 400 (``invalid-json``); JSON that breaks the model is a 422
(``validation``) whose ``detail`` names the first offending field and whose ``errors`` lists
them all. Nothing is written before a request has passed both.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn, TypeVar

from pydantic import BaseModel, ValidationError

from threadline.api.http import Request
from threadline.api.problems import MalformedJson
from threadline.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)

#: Deepest nesting of arrays and objects a request body may have (the body itself is level 1).
MAX_JSON_DEPTH = 128


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def parse_json(raw: bytes) -> Any:
    """Decode a JSON body; an empty body is an empty object. Raises :class:`MalformedJson`."""
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedJson(f"the body is not UTF-8 text: {exc.reason}") from exc
    try:
        # NaN and Infinity are Python's extensions, not JSON: refuse them like any bad token.
        return json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise MalformedJson(f"the body is not valid JSON: {exc}") from exc


def deepest_member(body: dict[str, Any], limit: int) -> str | None:
    """The first top-level member of ``body`` nested deeper than ``limit``, or None.

    Iterative, so a deep value cannot exhaust the stack while it is measured.
    """
    for name, member in body.items():
        stack = [(member, 2)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, dict | list):
                if depth > limit:
                    return name
                children = value.values() if isinstance(value, dict) else value
                stack.extend((child, depth + 1) for child in children)
    return None


def field_path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a dotted path (``payload.items.0``)."""
    return ".".join(str(part) for part in loc) or "body"


def _schema_violation(error: ValidationError, *, where: str) -> ValidationFailed:
    errors = [
        {"field": field_path(item["loc"]), "message": item["msg"]} for item in error.errors()
    ]
    first = errors[0]
    return ValidationFailed(
        f"{where} {first['field']}: {first['message']}", field=first["field"], errors=errors
    )


def read_body(request: Request, model: type[M]) -> M:
    """The request body as ``model``; 400 for malformed JSON, 422 for a schema violation."""
    value = parse_json(request.body)
    if not isinstance(value, dict):
        raise ValidationFailed("the body must be a JSON object", field="body")
    deep = deepest_member(value, MAX_JSON_DEPTH)
    if deep is not None:
        raise ValidationFailed(
            f"{deep} nests deeper than {MAX_JSON_DEPTH} levels", field=deep
        )
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise _schema_violation(exc, where="field") from exc


def read_query(request: Request, model: type[M]) -> M:
    """The query string as ``model`` (the first value of each parameter); 422 when it breaks."""
    values = {name: found[0] for name, found in request.query.items() if found}
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise _schema_violation(exc, where="query parameter") from exc


__all__ = [
    "MAX_JSON_DEPTH",
    "deepest_member",
    "field_path",
    "parse_json",
    "read_body",
    "read_query",
]
