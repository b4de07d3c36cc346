"""The base of every Job model: ``Model`` plus a JSON schema shaped for OpenAPI and Kubernetes.

pydantic renders an optional field as ``anyOf: [<type>, {type: null}]`` with ``default: null`` and a
generated ``title``. Kubernetes structural schemas have no null type, and an enum or range nested
inside ``anyOf`` is easy for a converter to lose, so every Job model flattens its optional
properties to the inner schema (the ``enum``, ``minimum`` or ``pattern`` then sits on the property
itself, next to its description), drops null defaults and drops titles. A model's description is
its docstring with the line wrapping undone, so it reads as the reference's sentence.

A property that refers to another model keeps its description beside the ``$ref`` even when it
repeats the model's docstring (pydantic drops such a repeat), so that a converter which inlines
references (``nodus.api.schemas``) finds a description on every property. Validation is not
affected: ``null`` is still accepted where the Python type allows None.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict


class Model(BaseModel):
    """Base of every spec/status model: camelCase on the wire, unknown fields refused, read-only.

    Instances are frozen: the server validates with them and clients read through them
    (:mod:`nodus.apis.v1.objects`); nobody writes an object by mutating a model. A client reading a
    stored object validates with :data:`READING` as the context, which drops the fields this version
    does not know (a newer server's), as Kubernetes clients ignore unknown fields; the server never
    passes it, so a request's unknown field is still refused.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        # Only the camelCase wire names are accepted: a Python name would validate but be stored
        # under a key nothing else reads.
        populate_by_name=False,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=False,
        ser_json_timedelta="iso8601",
        # Validators are built on a model's first use, not at import: an agent reads two kinds of the dozen,
        # and its start (which a Node's heartbeat grace waits for) should not pay for the rest.
        defer_build=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_when_reading(cls, data: Any, info: ValidationInfo) -> Any:
        if info.context is not READING or not isinstance(data, dict):
            return data
        known = _wire_names(cls)
        if known.issuperset(data):
            return data
        return {key: value for key, value in data.items() if key in known}

    def to_json(self) -> dict[str, Any]:
        """The wire form: camelCase, unset and None fields omitted."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


READING: Final = {"reading": True}
"""The validation context of a client reading a stored object (see :class:`Model`)."""


@functools.cache
def _wire_names(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(field.alias or name for name, field in model.model_fields.items())


_NULL = {"type": "null"}


def _flatten_optional(prop: dict[str, Any]) -> None:
    options = prop.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and _NULL in options:
        inner = options[0] if options[1] == _NULL else options[1]
        del prop["anyOf"]
        for key, value in inner.items():
            prop.setdefault(key, value)
    if "default" in prop and prop["default"] is None:
        del prop["default"]
    prop.pop("title", None)


def _shape_schema(schema: JsonDict, cls: type[Any]) -> None:
    schema.pop("title", None)
    description = schema.get("description")
    if isinstance(description, str):
        schema["description"] = " ".join(description.split())  # a docstring wrapped to the line length
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    descriptions = {field.alias or name: field.description for name, field in cls.model_fields.items()}
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        _flatten_optional(prop)
        if "description" not in prop and descriptions.get(name):
            prop["description"] = descriptions[name]


class WireModel(Model):
    """Base of the Job spec and status models (camelCase, unknown fields refused, structural schema).

    Only the JSON names are accepted: ``Model`` also accepts Python names (``max_cost_usd``), which
    would pass validation yet be stored under a key that defaulting, aliases and the cross-field
    rules (which read the camelCase JSON) never see.
    """

    model_config = ConfigDict(json_schema_extra=_shape_schema, validate_by_name=False, validate_by_alias=True)


def list_map(*keys: str) -> dict[str, Any]:
    """The OpenAPI extensions of a list that server-side apply merges by ``keys`` (``x-kubernetes-list-type: map``)."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}
