"""The OpenAPI 3.1 document, generated from the route table and its pydantic models.

Schemas come from the same models that validate requests and build responses (pydantic's JSON
Schema is draft 2020-12, which OpenAPI 3.1 uses), and paths, methods, parameters and statuses
from the same :class:`~threadline.api.router.Route` values that route requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from threadline.api.models import ID_REGEX, Problem
from threadline.api.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_BASE, PROBLEM_TYPES
from threadline.api.router import DOT_SEGMENTS, Route, free_form, routes_by_template
from threadline.threads.agents import AgentRegistry

API_TITLE = "threadline"
API_VERSION = "0.1.0"

_Mode = Literal["validation", "serialization"]

#: Statuses every authenticated route may answer with at the edge.
_EDGE_PROBLEMS = (400, 401, 403, 503)

SECURITY_SCHEMES: dict[str, Any] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": (
            "The deployment's API token (`THREADLINE_API_TOKEN`: every capability in every"
            " space), a scoped token (`tl1.`..., minted with `threadline.access.mint` or"
            " `POST /v1/tokens`: one space, optionally one Thread, listed capabilities, an"
            " expiry), or whatever the app's `@app.authorize` hook accepts."
        ),
    },
    "accessToken": {
        "type": "apiKey",
        "in": "query",
        "name": "access_token",
        "description": (
            "A scoped token in the query, for clients that cannot send headers (a browser's"
            " `EventSource`). Accepted on the events route only; never logged or forwarded."
            " The API token is never accepted here."
        ),
    },
}
#: Statuses that carry ``Retry-After`` where a route declares them (the stream caps).
_RETRY_AFTER = (429, 503)
#: Statuses every route with a JSON body may answer with.
_BODY_PROBLEMS = (400, 413, 422)

ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": ID_REGEX,
    "not": {"enum": sorted(DOT_SEGMENTS)},
}


def _models(routes: Sequence[Route]) -> list[tuple[type[BaseModel], _Mode]]:
    wanted: list[tuple[type[BaseModel], _Mode]] = [(Problem, "serialization")]
    for route in routes:
        if route.body is not None:
            wanted.append((route.body, "validation"))
        for model, _ in route.responses.values():
            if model is not None:
                wanted.append((model, "serialization"))
    unique: list[tuple[type[BaseModel], _Mode]] = []
    for item in wanted:
        if item not in unique:
            unique.append(item)
    return unique


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    parameters = []
    for name, prop in schema.get("properties", {}).items():
        prop = dict(prop)
        description = prop.pop("description", None)
        parameter: dict[str, Any] = {
            "name": name, "in": "query", "required": name in required, "schema": prop,
        }
        if description:
            parameter["description"] = description
        parameters.append(parameter)
    return parameters


def _problem_statuses(route: Route) -> list[int]:
    statuses: set[int] = set(route.problems)
    if route.authenticated:
        statuses.update(_EDGE_PROBLEMS)
        statuses.add(404)
    if route.body is not None:
        statuses.update(_BODY_PROBLEMS)
    if route.query is not None:
        statuses.add(422)
    if route.headers:
        statuses.add(400)
    return sorted(statuses)


_Refs = dict[tuple[Any, _Mode], Any]


def _operation(route: Route, refs: _Refs) -> dict[str, Any]:
    problem_ref = refs[(Problem, "serialization")]
    responses: dict[str, Any] = {}
    for status, (model, description) in sorted(route.responses.items()):
        schema = free_form() if model is None else refs[(model, "serialization")]
        if route.media_type != "application/json":
            # A text body (an event stream): its format is told in the description.
            schema = {"type": "string"}
        response: dict[str, Any] = {
            "description": description,
            "content": {route.media_type: {"schema": schema}},
        }
        if route.location:
            response["headers"] = {
                "Location": {
                    "description": "The submission's resource.",
                    "schema": {"type": "string"},
                }
            }
        responses[str(status)] = response
    for status in _problem_statuses(route):
        titles = sorted(title for code, title in PROBLEM_TYPES.values() if code == status)
        responses[str(status)] = {
            "description": " / ".join(titles) or "Problem",
            "content": {PROBLEM_CONTENT_TYPE: {"schema": problem_ref}},
        }
        if status in _RETRY_AFTER and status in route.problems:
            responses[str(status)]["headers"] = {"Retry-After": {
                "description": "Seconds to wait before trying again (when the refusal is"
                               " a full stream count).",
                "schema": {"type": "integer"}}}
    operation: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "responses": responses,
    }
    if route.capability is None:
        operation["security"] = []
    else:
        operation["x-capability"] = route.capability.value
        if route.query_token:
            operation["security"] = [{"bearer": []}, {"accessToken": []}]
    parameters = _query_parameters(route.query) if route.query is not None else []
    parameters.extend(
        {"name": name, "in": "header", "required": False, "description": text,
         "schema": {"type": "string"}}
        for name, text in route.headers
    )
    if parameters:
        operation["parameters"] = parameters
    if route.description:
        operation["description"] = route.description
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": refs[(route.body, "validation")]}},
        }
    return operation


def build_document(routes: Sequence[Route]) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing ``routes``."""
    refs: _Refs
    refs, definitions = models_json_schema(
        _models(routes), ref_template="#/components/schemas/{model}"
    )
    paths: dict[str, Any] = {}
    for template, group in routes_by_template(list(routes)).items():
        item: dict[str, Any] = {}
        names = group[0].params
        if names:
            item["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": dict(ID_SCHEMA)}
                for name in names
            ]
        for route in group:
            item[route.method.lower()] = _operation(route, refs)
        paths[template] = item
    slugs = ", ".join(sorted(PROBLEM_TYPES))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": API_TITLE,
            "version": API_VERSION,
            "description": (
                "Durable agent threads. Errors are application/problem+json; their `type` is "
                f"`{PROBLEM_TYPE_BASE}<slug>` with slug one of: {slugs}. Each operation"
                " names the capability it needs in `x-capability` (read, submit, decide,"
                " abort, admin); a credential without it, or scoped to another space or"
                " Thread, gets 403."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": definitions.get("$defs", {}),
            "securitySchemes": SECURITY_SCHEMES,
        },
        "security": [{"bearer": []}],
    }


def with_agents(document: dict[str, Any], agents: AgentRegistry) -> dict[str, Any]:
    """``document`` with this deployment's agents: ``x-agents`` lists each (name, version,
    the JSON Schema of its input, a reference into ``components.schemas`` for an agent
    registered with an input model, else any JSON value, and its limits: ``concurrency``
    and ``rate`` as ``{"limit", "per_ms"}``, each null when it has none)."""
    models: list[tuple[type[BaseModel], _Mode]] = [
        (binding.input_model, "validation") for binding in agents
        if binding.input_model is not None]
    refs, definitions = models_json_schema(models, ref_template="#/components/schemas/{model}")
    listed = [{"name": binding.name, "version": binding.version,
               "input": {} if binding.input_model is None
               else refs[(binding.input_model, "validation")],
               "concurrency": binding.concurrency,
               "rate": None if binding.rate is None
               else {"limit": binding.rate.limit, "per_ms": binding.rate.per_ms}}
              for binding in agents]
    components = dict(document["components"])
    components["schemas"] = {**definitions.get("$defs", {}), **components["schemas"]}
    return {**document, "components": components, "x-agents": listed}


__all__ = [
    "API_TITLE", "API_VERSION", "ID_SCHEMA", "SECURITY_SCHEMES",
    "build_document", "with_agents",
]
