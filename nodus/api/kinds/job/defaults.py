"""Defaulting of the Job spec: the effective values are written into the stored spec.

A default is declared once, on its model field (ADR 0046 §5): that declaration is what OpenAPI
and ``kubectl explain`` show, and :func:`apply_defaults` writes it into the request wherever the
field is absent or ``null``. Objects whose every field has a default (``recovery`` and its
``checkpoint``, ``placement``, ``network.egress``) are declared with a model ``default_factory`` and
are created when absent, so every Job shows its recovery, placement and egress policy. Optional
objects without such a factory (``distributed``, an output's ``sink``, an input's ``output``) get
their fields defaulted only when the user wrote them.

One default depends on another field and is written here explicitly: ``recovery.checkpoint.format``
is ``Dcp`` for a distributed Job and ``Snapshot`` otherwise. Aliases are folded first (see
``aliases``), so ``resources.nodes: 4`` gets the distributed defaults too.

Defaulting runs before validation on any JSON: a value of the wrong type is left alone (and
validation reports it), so this module never raises.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from nodus.api.kinds.job.jsonview import JSONObject, as_object, child, objects
from nodus.apis.v1.jobspec import JobSpec


def apply_defaults(spec: object) -> None:
    """Write the declared defaults into ``spec`` in place (a Job's ``spec`` as JSON)."""
    obj = as_object(spec)
    if obj is None:
        return
    _write_declared_defaults(JobSpec, obj)
    checkpoint = child(obj, "recovery", "checkpoint")
    if checkpoint is not None and checkpoint.get("format") is None:
        checkpoint["format"] = "Dcp" if as_object(obj.get("distributed")) is not None else "Snapshot"


@functools.cache
def _plan(model: type[BaseModel]) -> tuple[tuple[str, Any, type[BaseModel] | None, bool], ...]:
    """Per field of ``model``: its JSON key, declared default, nested model and whether it is a list of
    them. Read from the model once, not on every request."""
    steps = []
    for name, field in model.model_fields.items():
        nested = _nested_model(field.annotation)
        steps.append((field.alias or name, _declared_default(field), *(nested or (None, False))))
    return tuple(steps)


def _write_declared_defaults(model: type[BaseModel], obj: JSONObject) -> None:
    for key, default, nested_model, is_list in _plan(model):
        if default is not None and obj.get(key) is None:
            # Lists and objects are copied so that requests never share (and mutate) one default.
            obj[key] = copy.deepcopy(default) if isinstance(default, dict | list) else default
        if nested_model is None:
            continue
        if is_list:
            for _, item in objects(obj.get(key)):
                _write_declared_defaults(nested_model, item)
        else:
            value = as_object(obj.get(key))
            if value is not None:
                _write_declared_defaults(nested_model, value)


def _declared_default(field: FieldInfo) -> Any:
    """The JSON a missing field defaults to: its declared value, ``{}`` for a model factory, else None."""
    if field.default is not PydanticUndefined and field.default is not None:
        return copy.deepcopy(field.default)
    factory = field.default_factory
    if isinstance(factory, type) and issubclass(factory, BaseModel):
        return {}
    return None


def _nested_model(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds, and whether it holds a list of them (``X``, ``X | None``, ``list[X] | None``)."""
    for candidate in (annotation, *get_args(annotation)):
        if get_origin(candidate) is list:
            (item,) = get_args(candidate)
            if isinstance(item, type) and issubclass(item, BaseModel):
                return item, True
        elif isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate, False
    return None
