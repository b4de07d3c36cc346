"""Field management: Kubernetes server-side apply and ``metadata.managedFields``, as pure functions over JSON.

Every write records who owns which field of an object, in ``metadata.managedFields`` entries whose format and
behaviour match kube-apiserver's for a custom resource with a status subresource, so that kubectl
(``apply --server-side``, ``get --show-managed-fields``) and client libraries see what they see against Kubernetes.

- :func:`apply`: server-side apply of a partial configuration (``PATCH`` with ``application/apply-patch+yaml``);
  raises :class:`ApplyConflict` when it would change fields other managers own, unless forced.
- :func:`update_managed_fields`: the managedFields after a create, update or non-apply patch.
- :func:`fields_v1`: the FieldsV1 document of an object's fields (tests, debugging).

``ListKeys`` declares the kind's keyed lists by dotted path (``"spec.env": ("name",)``); an empty tuple declares a
set-like list. Every other list is atomic; every JSON object is granular. See ``docs/adr/0030-server-side-apply.md``.
"""

from nodus.api.fieldmanagement.conflicts import ApplyConflict, Conflict
from nodus.api.fieldmanagement.lastapplied import LAST_APPLIED_ANNOTATION
from nodus.api.fieldmanagement.operations import (
    BEFORE_FIRST_APPLY,
    InvalidApplyConfiguration,
    apply,
    fields_v1,
    update_managed_fields,
)
from nodus.api.fieldmanagement.schema import ListKeys

__all__ = [
    "BEFORE_FIRST_APPLY",
    "LAST_APPLIED_ANNOTATION",
    "ApplyConflict",
    "Conflict",
    "InvalidApplyConfiguration",
    "ListKeys",
    "apply",
    "fields_v1",
    "update_managed_fields",
]
