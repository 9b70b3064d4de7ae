"""Examples in the OpenAPI document: every request body and every 2xx answer shows one, as
captured from a real server (app/api/examples.py), so a client's author sees what really
comes back rather than a schema alone.

FastAPI writes the document without the null values anywhere in it, the examples' included,
so an example's `"exit_code": null` came out as a missing required field. The examples the
models and routes declare are put back here as they were written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.routing import BaseRoute

from app.api.examples import EXAMPLES


def add_examples(document: dict[str, Any], routes: list[BaseRoute]) -> dict[str, Any]:
    """`document` with the declared examples restored and the captured ones set where its
    content has none (in place: applying it twice changes nothing)."""
    _restore_model_examples(document.get("components", {}).get("schemas", {}))
    _restore_route_examples(document.get("paths", {}), routes)
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            captured = EXAMPLES.get(operation.get("operationId", ""), {})
            body = operation.get("requestBody", {}).get("content", {})
            _set_missing(body, captured.get("request", {}))
            for status, response in operation.get("responses", {}).items():
                _set_missing(response.get("content", {}), captured.get(status, {}))
    return document


def _set_missing(content: dict[str, Any], examples: dict[str, Any]) -> None:
    for media_type, example in examples.items():
        entry = content.get(media_type)
        # A media type has `example` or `examples`, never both: the OpenAPI rules forbid it.
        if entry is not None and "examples" not in entry:
            entry.setdefault("example", example)


def _models(base: type[BaseModel] = BaseModel) -> list[type[BaseModel]]:
    found = []
    for model in base.__subclasses__():
        found.append(model)
        found.extend(_models(model))
    return found


def _restore_model_examples(schemas: dict[str, Any]) -> None:
    for model in _models():
        extra = model.model_config.get("json_schema_extra")
        if not isinstance(extra, dict) or "examples" not in extra:
            continue
        # A model used both ways is published twice, as `Name-Input` and `Name-Output`.
        for name in (model.__name__, f"{model.__name__}-Input", f"{model.__name__}-Output"):
            if name in schemas and "examples" in schemas[name]:
                schemas[name]["examples"] = extra["examples"]


def _restore_route_examples(paths: dict[str, Any], routes: list[BaseRoute]) -> None:
    for route in routes:
        if not isinstance(route, APIRoute) or route.path not in paths:
            continue
        for method in route.methods or ():
            operation = paths[route.path].get(method.lower())
            if operation is None:
                continue
            for status, declared in route.responses.items():
                published = operation["responses"].get(str(status), {}).get("content", {})
                for media_type, content in declared.get("content", {}).items():
                    for key in ("example", "examples"):
                        if key in content and media_type in published:
                            published[media_type][key] = content[key]


def install_examples(app: FastAPI, routes: list[BaseRoute]) -> None:
    """`routes`: the API's own (app/api/router.py), whose declared examples are restored."""
    build: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        return add_examples(build(), routes)

    app.openapi = openapi  # type: ignore[method-assign]
