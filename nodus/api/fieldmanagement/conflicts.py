"""Apply conflicts and their wording, which kubectl users see verbatim.

A conflict is a field the applied configuration would change (set to a different value, or add) while another
manager owns it. kube-apiserver answers 409 Conflict with:

- ``message``: ``Apply failed with 1 conflict: conflict with "m1" using nodus.dev/v1: .spec.parallelism``, or for
  several ``Apply failed with 2 conflicts: conflicts with "m1" using nodus.dev/v1:\\n- .spec.a\\n- .spec.b``,
  grouped by manager (managers sorted by their identifier, fields in structured-merge-diff's order);
- ``details.causes``: one ``{"type": "FieldManagerConflict", "message": "conflict with ...", "field": ".spec.a"}``
  per conflicting (manager, field).

A manager is printed as ``"name"`` for an applier and ``"name" using <apiVersion>`` for an updater, with
`` with subresource "status"`` after the name when the entry belongs to /status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from nodus.api.fieldmanagement import gojson
from nodus.api.fieldmanagement.fieldsets import FieldSet, Path, path_string
from nodus.api.fieldmanagement.managers import APPLY, UPDATE, ManagerIdentity


@dataclass(frozen=True)
class Conflict:
    """One field the applier would change while ``manager`` owns it.

    ``manager`` is the manager's name; ``operation``, ``subresource`` and ``api_version`` identify which of that
    manager's managedFields entries owns the field (a manager that both applied and updated has two entries).
    ``path`` is the field as a path, for callers that compute with it.
    """

    manager: str
    field: str
    operation: str = APPLY
    subresource: str = ""
    api_version: str = ""
    path: Path = dataclass_field(default=(), compare=False, repr=False)

    @property
    def identity(self) -> ManagerIdentity:
        return ManagerIdentity(self.manager, self.operation, self.subresource, self.api_version)

    @property
    def owner(self) -> str:
        """The manager as kube-apiserver prints it: ``"m1"``, ``"m1" using nodus.dev/v1``, with its subresource."""
        text = gojson.quote(self.manager)
        if self.subresource:
            text += f" with subresource {gojson.quote(self.subresource)}"
        if self.operation == UPDATE:
            text += f" using {self.api_version}"
        return text

    @property
    def message(self) -> str:
        """The message of this conflict's status cause."""
        return f"conflict with {self.owner}"


class ApplyConflict(Exception):
    """An apply that would change fields other managers own; raised unless the apply is forced."""

    def __init__(self, conflicts: list[Conflict]) -> None:
        self.conflicts = conflicts
        super().__init__(self.message())

    @classmethod
    def from_owners(cls, owners: Mapping[ManagerIdentity, FieldSet]) -> ApplyConflict:
        """The conflict of each field in each owner's set, listed by field (structured-merge-diff's order), then by
        owner identifier."""
        everything = FieldSet()
        for fields in owners.values():
            everything |= fields
        rank = {path: position for position, path in enumerate(everything.ordered())}
        pairs = sorted(
            ((identity, path) for identity, fields in owners.items() for path in fields.ordered()),
            key=lambda pair: (rank[pair[1]], pair[0].json()),
        )
        return cls(
            [
                Conflict(owner.manager, path_string(path), owner.operation, owner.subresource, owner.api_version, path)
                for owner, path in pairs
            ]
        )

    def message(self) -> str:
        """kube-apiserver's Status message for these conflicts."""
        if len(self.conflicts) == 1:
            only = self.conflicts[0]
            return f"Apply failed with 1 conflict: conflict with {only.owner}: {only.field}"
        # Grouped by owner, owners sorted by identifier. Within an owner the fields keep their order, which is the
        # owner's own set order because a subset iterates in the order of the full set.
        groups: dict[ManagerIdentity, list[Conflict]] = {}
        for conflict in self.conflicts:
            groups.setdefault(conflict.identity, []).append(conflict)
        lines: list[str] = []
        for identity in sorted(groups, key=ManagerIdentity.json):
            lines.append(f"conflicts with {groups[identity][0].owner}:")
            lines.extend(f"- {conflict.field}" for conflict in groups[identity])
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    def causes(self) -> list[dict[str, Any]]:
        """The ``details.causes`` of the 409 Status, in the order of :attr:`conflicts`."""
        return [{"type": "FieldManagerConflict", "message": c.message, "field": c.field} for c in self.conflicts]
