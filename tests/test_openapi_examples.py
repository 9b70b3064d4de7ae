"""Every request body and every 2xx answer in the OpenAPI document carries an example, and
every example validates against the schema published beside it, so an example can never show
a field the server would refuse or no longer sends (app/api/openapi_examples.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from app.api.openapi_examples import add_examples
from app.api.openapi_export import openapi_document

DOCUMENT = openapi_document()
SCHEMAS = DOCUMENT["components"]["schemas"]


def _contents() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, media type object) of every request body and every 2xx answer."""
    for path, path_item in DOCUMENT["paths"].items():
        for method, operation in path_item.items():
            for media_type, content in operation.get("requestBody", {}).get("content", {}).items():
                yield f"{method.upper()} {path} body {media_type}", content
            for status, response in operation["responses"].items():
                if status.startswith("2"):
                    for media_type, content in response.get("content", {}).items():
                        yield f"{method.upper()} {path} {status} {media_type}", content


def _schema_examples(schema: dict[str, Any]) -> list[Any]:
    if "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rsplit("/", 1)[1]]
    return list(schema.get("examples", []))


def _validator(schema: dict[str, Any]) -> Draft202012Validator:
    # The components beside the schema: its `#/components/schemas/…` references resolve.
    return Draft202012Validator({**schema, "components": DOCUMENT["components"]})


CONTENTS = list(_contents())


@pytest.mark.parametrize(("where", "content"), CONTENTS, ids=[where for where, _ in CONTENTS])
def test_every_body_and_2xx_answer_has_an_example(where: str, content: dict[str, Any]) -> None:
    examples = [
        content.get("example"),
        *(item.get("value") for item in content.get("examples", {}).values()),
        *_schema_examples(content.get("schema", {})),
    ]
    assert any(example is not None for example in examples), where


@pytest.mark.parametrize(("where", "content"), CONTENTS, ids=[where for where, _ in CONTENTS])
def test_every_example_validates_against_its_schema(where: str, content: dict[str, Any]) -> None:
    schema = content.get("schema")
    examples = [
        content.get("example"),
        *(item.get("value") for item in content.get("examples", {}).values()),
    ]
    for example in filter(lambda item: item is not None, examples):
        if schema is None:
            assert isinstance(example, str), where  # a text or bytes body
            continue
        errors = [error.message for error in _validator(schema).iter_errors(example)]
        assert not errors, (where, errors[:3])


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_schema_example_validates(name: str) -> None:
    schema = SCHEMAS[name]
    validator = _validator({"$ref": f"#/components/schemas/{name}"})
    for example in schema.get("examples", []):
        errors = [error.message for error in validator.iter_errors(example)]
        assert not errors, (name, errors[:3])


def test_applying_the_examples_twice_changes_nothing() -> None:
    assert add_examples(openapi_document(), []) == DOCUMENT
