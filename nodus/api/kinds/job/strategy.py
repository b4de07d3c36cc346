"""``JobStrategy``: the Job's hooks into the generic store's write path.

On create the client's ``status`` is replaced by ``phase: Pending``, aliases are folded
(``aliases``) and defaults written
(``defaults``), so the stored spec shows every effective value. On update the old status is carried
over, and the new spec is canonicalised and defaulted the same way, so an update that omits a
defaulted field keeps it defaulted instead of reading as a change. Preparers never raise; the
validators never mutate and return every problem at once (``validation``). What the agent will connect
to (``destinationrules``) and what the runtime cannot run (``validation_runnable``) are checked on create
only, so a Job stored before such a rule can still be cancelled or suspended. A write that changes the shown
progress or cost stores a sample of the Job's progress history with it (``samples``, ADR 0054).
"""

from __future__ import annotations

from nodus.api.kinds import destinationrules
from nodus.api.kinds.job import aliases, defaults, notices, samples, validation
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import estimates, fieldpath
from nodus.apimachinery.destinations import Policy
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.storage.committing import Companion

_CEILING_PATH = Path("metadata", "annotations").key(estimates.RATE_CEILING)


class JobStrategy(Strategy):
    """Create, update and status rules of ``jobs.nodus.dev``, refusing destinations that ``destinations``
    (the server's policy; strict by default) refuses."""

    def __init__(self, destinations: Policy | None = None) -> None:
        self.destinations = destinations or Policy()

    def prepare_for_create(self, obj: Object) -> None:
        super().prepare_for_create(obj)
        aliases.canonicalize(obj.get("spec"))
        defaults.apply_defaults(obj.get("spec"))
        # The server's first observation (ADR 0046 §2): accepted, not yet admitted. Controllers take
        # it from here through /status.
        obj["status"] = {"phase": "Pending"}

    def prepare_for_update(self, new: Object, old: Object) -> None:
        super().prepare_for_update(new, old)
        aliases.canonicalize(new.get("spec"), old.get("spec"))
        defaults.apply_defaults(new.get("spec"))

    def validate(self, obj: Object) -> list[FieldError]:
        problems = validation.validate_create(obj) + destinationrules.job_rules(obj, self.destinations)
        if estimates.RATE_CEILING in ((obj.get("metadata") or {}).get("annotations") or {}):
            problems.append(
                fieldpath.forbidden(
                    _CEILING_PATH, "is set by the server when a create is bound to an estimate (If-Match on its ETag)"
                )
            )
        return problems

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        problems = validation.validate_spec_update(new, old)
        before = (old["metadata"].get("annotations") or {}).get(estimates.RATE_CEILING)
        if (new["metadata"].get("annotations") or {}).get(estimates.RATE_CEILING) != before:
            problems.append(
                fieldpath.forbidden(_CEILING_PATH, "is the estimate the Job was bound to; it cannot change")
            )
        return problems

    def validate_status(self, obj: Object) -> list[FieldError]:
        return validation.validate_status(obj)

    def warnings_on_create(self, obj: Object) -> list[str]:
        return notices.on_create(obj)

    def warnings_on_update(self, new: Object, old: Object) -> list[str]:
        return notices.on_update(new, old)

    def companions(self, new: Object, old: Object | None) -> tuple[Companion, ...]:
        """A sample of the progress history when the write changes the Job's progress or cost (``samples``)."""
        sample = samples.recorded(new, old)
        return (sample,) if sample is not None else ()
