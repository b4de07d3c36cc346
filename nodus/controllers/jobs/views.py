"""Typed views of what ``planning`` hands the Job controller's other modules as JSON.

``planning`` passes a Job's spec, the status it is building and the attempts as dicts; the modules it
calls read them through the typed views of :mod:`nodus.apis.v1.objects`, converting here, once per
call, at the top. What is already a view passes through unchanged, so a caller may hand over either.
An attempt read from an informer is cached by its resourceVersion; a spec or a status on its own has
no version and is parsed each time (tens of microseconds for a Job's).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodus.apis.v1 import objects
from nodus.apis.v1.jobspec import JobSpec
from nodus.apis.v1.jobstatus import JobStatus

Object = dict[str, Any]


def job_spec(spec: JobSpec | Object) -> JobSpec:
    """The view of a Job's ``spec``; read leniently, as :func:`objects.read` reads a stored Job."""
    if isinstance(spec, JobSpec):
        return spec
    return objects.read(objects.Job, {"spec": spec}).spec


def job_status(status: JobStatus | Object) -> JobStatus:
    """The view of a Job's ``status`` (stored, or being built from the stored one); read leniently."""
    if isinstance(status, JobStatus):
        return status
    return objects.read(objects.Job, {"spec": {}, "status": status}).status


def attempt(obj: objects.Attempt | Object) -> objects.Attempt:
    """The view of an Attempt."""
    return obj if isinstance(obj, objects.Attempt) else objects.read(objects.Attempt, obj)


def attempts(objs: Iterable[objects.Attempt | Object]) -> list[objects.Attempt]:
    """The views of Attempts, in the same order."""
    return [attempt(obj) for obj in objs]
