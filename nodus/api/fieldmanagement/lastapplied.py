"""kubectl's move from client-side apply to server-side apply, which kube-apiserver eases for the manager "kubectl".

Client-side ``kubectl apply`` records what it applied in the ``kubectl.kubernetes.io/last-applied-configuration``
annotation and owns the fields as the updater ``kubectl-client-side-apply``. When the same user then runs
``kubectl apply --server-side`` (field manager ``kubectl``), kube-apiserver:

- lets the apply take fields that conflict only because the client-side apply set them: a conflict on a field the
  annotation lists with the live value is forced (:func:`allowed_conflicts`); any other conflict is still reported;
- keeps the annotation in step with server-side applies, so that a later client-side apply computes the right diff
  (:func:`sync_annotation`). The annotation is dropped if it would push the annotations past 256 KiB.

Both apply only to the manager named ``kubectl``; other managers opt out by their name.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from nodus.api.fieldmanagement import gojson
from nodus.api.fieldmanagement.comparison import compare, field_set
from nodus.api.fieldmanagement.fieldsets import FieldSet
from nodus.api.fieldmanagement.schema import ListTypes, StructureError

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
KUBECTL_MANAGER = "kubectl"
# apimachinery's TotalAnnotationSizeLimitB.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def allowed_conflicts(live: dict[str, Any], api_version: str, types: ListTypes) -> FieldSet | None:
    """The fields a ``kubectl`` apply may take from other managers without force: those the last-applied annotation
    sets to the value the live object still has. None when there is no usable annotation."""
    text = _annotations(live).get(LAST_APPLIED_ANNOTATION)
    if not isinstance(text, str) or not text:
        return None
    try:
        last_applied = json.loads(text)
    except ValueError:
        return None
    if not isinstance(last_applied, dict) or last_applied.get("apiVersion") != api_version:
        return None
    try:
        applied_fields = field_set(last_applied, types, strict=True)
        drift = compare(last_applied, live, types)
    except StructureError:
        return None
    # Fields the live object no longer has as last applied are not the client-side apply's to give away.
    return applied_fields - drift.modified - drift.added - drift.removed


def sync_annotation(obj: dict[str, Any], applied: dict[str, Any]) -> None:
    """Rewrite ``obj``'s last-applied annotation, if it has one, to the configuration just applied."""
    annotations = _annotations(obj)
    current = annotations.get(LAST_APPLIED_ANNOTATION)
    if not isinstance(current, str) or not current or not all(isinstance(v, str) for v in annotations.values()):
        return
    annotations[LAST_APPLIED_ANNOTATION] = _encode_configuration(applied)
    size = sum(len(key.encode()) + len(value.encode()) for key, value in annotations.items())
    if size > TOTAL_ANNOTATION_SIZE_LIMIT:
        del annotations[LAST_APPLIED_ANNOTATION]


def _encode_configuration(applied: dict[str, Any]) -> str:
    """The configuration without its own annotation, as Go's json.Encoder writes it (trailing newline included)."""
    configuration = copy.deepcopy(applied)
    metadata = configuration.get("metadata")
    if isinstance(metadata, dict) and "annotations" in metadata:
        annotations = metadata["annotations"]
        if isinstance(annotations, dict) and all(isinstance(value, str) for value in annotations.values()):
            metadata["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}
        else:
            # Upstream cannot read such annotations as strings and writes the configuration without them.
            del metadata["annotations"]
    return gojson.dumps(configuration) + "\n"


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return annotations if isinstance(annotations, dict) else {}
