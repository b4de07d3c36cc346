"""What a kind contributes to the generic store: small, pure, synchronous hooks.

The generic store (``nodus.api.store``) owns the order of a write: system metadata, prepare,
validate, admit, store, emit. A kind fills in these hooks and nothing else. Preparers mutate and
never raise; validators never mutate and return every problem at once as field errors.

Objects are plain JSON dictionaries (``{"apiVersion", "kind", "metadata", "spec", "status"}``)
throughout; a kind may decode them into typed models inside its hooks.
"""

from __future__ import annotations

from typing import Any

from nodus.apimachinery.fieldpath import FieldError
from nodus.storage.committing import Companion

Object = dict[str, Any]


class Strategy:
    """Defaults for a kind with a spec and a status written through ``/status``."""

    def prepare_for_create(self, obj: Object) -> None:
        """Canonicalise aliases, apply defaults and drop what a client may not set (``status``)."""
        obj.pop("status", None)

    def prepare_for_update(self, new: Object, old: Object) -> None:
        """The main path may not change status: the old status is carried over."""
        if "status" in old:
            new["status"] = old["status"]
        else:
            new.pop("status", None)

    def validate(self, obj: Object) -> list[FieldError]:
        """Every problem with a new object, structural and semantic, each naming its field."""
        return []

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        """Every problem with an update: the object's own rules plus immutability and transitions."""
        return self.validate(new)

    def warnings_on_create(self, obj: Object) -> list[str]:
        return []

    def warnings_on_update(self, new: Object, old: Object) -> list[str]:
        return []

    def validate_status(self, obj: Object) -> list[FieldError]:
        """Every problem with a status written through ``/status`` (the rest is the old object's)."""
        return []

    def validate_status_update(self, new: Object, old: Object) -> list[FieldError]:
        """Every problem with a ``/status`` write given what is stored: the status rules plus transitions."""
        return self.validate_status(new)

    def spec_changed(self, new: Object, old: Object) -> bool:
        """Whether ``metadata.generation`` moves: only a change of the desired state counts."""
        return new.get("spec") != old.get("spec")

    def companions(self, new: Object, old: Object | None) -> tuple[Companion, ...]:
        """Rows of other tables to store with this write, in its transaction (a Job's progress sample,
        ADR 0054); called for every create (``old`` None) and update about to be stored, on any path. Pure;
        return nothing when nothing they record changed, so such a write costs no extra statement."""
        return ()
