"""The authenticated caller."""

from __future__ import annotations

from dataclasses import dataclass, field

ADMIN_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"


@dataclass(frozen=True)
class Principal:
    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        return ADMIN_GROUP in self.groups
