"""A small builder of Job objects for table-driven tests, and the Job's write path without a server.

``make_job().gpus(8).completions(4).build()`` returns a plain JSON dict, as a client would send it.
:func:`create` and :func:`update` run the Job's hooks in the order the generic store does (prepare,
then validate) and return the stored object with every field error, so tests assert what a user
would see in a 422 without a database or an HTTP server.
"""

from __future__ import annotations

import copy
from typing import Any, Self

from nodus.api.kinds.job import JOB
from nodus.api.strategy import Strategy
from nodus.apimachinery.fieldpath import ErrorType, FieldError

IMAGE = "ghcr.io/acme/train:1.0"
DIGEST = "sha256:" + "a" * 64
PINNED_IMAGE = f"ghcr.io/acme/train@{DIGEST}"
SHA256 = "b" * 64


class JobBuilder:
    """Builds one Job: a minimal valid spec (an image and a command) plus what the test sets."""

    def __init__(self, name: str) -> None:
        self._job: dict[str, Any] = {
            "apiVersion": "nodus.dev/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": "acme", "creationTimestamp": "2026-11-29T12:00:00Z"},
            "spec": {"image": IMAGE, "command": ["python", "train.py"]},
        }

    def set(self, path: str, value: Any) -> Self:
        """Set a dotted path such as ``spec.recovery.maxAttempts``, creating the objects on the way."""
        *parents, leaf = path.split(".")
        target = self._job
        for key in parents:
            target = target.setdefault(key, {})
        target[leaf] = copy.deepcopy(value)
        return self

    def unset(self, path: str) -> Self:
        """Remove a dotted path if present."""
        *parents, leaf = path.split(".")
        target = self._job
        for key in parents:
            target = target.get(key, {})
        target.pop(leaf, None)
        return self

    def gpus(self, count: int, *types: str) -> Self:
        return self.set("spec.resources.gpu", {"type": list(types) or ["H100"], "count": count})

    def completions(self, count: int) -> Self:
        return self.set("spec.completions", count)

    def parallelism(self, count: int) -> Self:
        return self.set("spec.parallelism", count)

    def distributed(self, **fields: Any) -> Self:
        return self.set("spec.distributed", fields)

    def env(self, *variables: dict[str, Any]) -> Self:
        return self.set("spec.env", list(variables))

    def inputs(self, *inputs: dict[str, Any]) -> Self:
        return self.set("spec.inputs", list(inputs))

    def outputs(self, *outputs: dict[str, Any]) -> Self:
        return self.set("spec.outputs", list(outputs))

    def volumes(self, *mounts: dict[str, Any]) -> Self:
        return self.set("spec.volumes", list(mounts))

    def sidecars(self, *sidecars: dict[str, Any]) -> Self:
        return self.set("spec.sidecars", list(sidecars))

    def egress(self, policy: str, **fields: Any) -> Self:
        return self.set("spec.network", {"egress": {"policy": policy, **fields}})

    def status(self, **fields: Any) -> Self:
        return self.set("status", fields)

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self._job)


def make_job(name: str = "train") -> JobBuilder:
    return JobBuilder(name)


def create(job: dict[str, Any], strategy: Strategy = JOB.strategy) -> tuple[dict[str, Any], list[FieldError]]:
    """The stored form of ``job`` and every error a create would report."""
    stored = copy.deepcopy(job)
    strategy.prepare_for_create(stored)
    return stored, strategy.validate(stored)


def update(
    job: dict[str, Any], old: dict[str, Any], strategy: Strategy = JOB.strategy
) -> tuple[dict[str, Any], list[FieldError]]:
    """The stored form of ``job`` written over the stored ``old``, and every error the update would report."""
    stored = copy.deepcopy(job)
    strategy.prepare_for_update(stored, old)
    return stored, strategy.validate_update(stored, old)


def stored(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` as a successful create stores it; fails the test if the create would be refused."""
    result, errors = create(job)
    assert errors == [], [error.message() for error in errors]
    return result


def kinds_and_fields(errors: list[FieldError]) -> list[tuple[ErrorType, str]]:
    """The (type, field) of each error, in order: what a test compares against its table."""
    return [(error.type, error.field) for error in errors]
