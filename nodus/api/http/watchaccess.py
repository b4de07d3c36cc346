"""Whether a running watch may go on: a member removed from a project stops seeing it within seconds.

kube-apiserver authorizes a watch once, when it starts; a user removed from a namespace goes on seeing it
until the watch times out (up to an hour here). Nodus checks again every :data:`RECHECK_SECONDS` while a
watch runs (ADR 0035): a watch of one project ends once the caller is no longer one of its members, and a
cluster-wide watch narrowed to the caller's projects ends once that set lost a project (the client
reconnects and is narrowed anew). The stream ends with an ERROR event carrying a 403 Status, so a client
library sees why rather than a silent close.

Only users are checked: Nodus's own identities (administrators, controllers, nodes) are not governed by
project membership. Project documents and a user's project set are read from the process's in-memory
:class:`~nodus.api.projectview.ProjectView` (ADR 0057), so a thousand watchers cost no database reads: a
member removed through this server is seen at the next check, one removed through another server as soon
as its event reaches this one's watch cache.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nodus.api.auth.authorization import Role, member_names, role_in
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.api.projectview import ProjectView
from nodus.api.registry import GROUP, KindInfo

RECHECK_SECONDS = 2.0

Recheck = Callable[[], Awaitable[APIError | None]]


def recheck(
    projects: ProjectView, principal: Principal, info: KindInfo, namespace: str | None, readable: list[str] | None
) -> Recheck | None:
    """The check a watch runs while it streams (None when nothing can change: Nodus's own identities, and kinds
    not narrowed by project). It returns the Status that ends the watch, or None to go on."""
    if principal.is_system or not (info.namespaced or info.kind == "Project"):
        return None
    if namespace is not None:

        async def still_member() -> APIError | None:
            if role_in(await projects.get(namespace), principal) >= Role.VIEWER:
                return None
            return _ended(principal, info, f'is no longer a member of project "{namespace}"')

        return still_member
    if readable is None:
        return None
    started = frozenset(readable)

    async def still_reads_them() -> APIError | None:
        lost = started - await projects.names_with_member(member_names(principal))
        if not lost:
            return None
        return _ended(principal, info, f'is no longer a member of project "{sorted(lost)[0]}"')

    return still_reads_them


def _ended(principal: Principal, info: KindInfo, why: str) -> APIError:
    return APIError(
        "Forbidden",
        f'{info.plural}.{GROUP} watch ended: User "{principal.user}" {why}',
        fix="Watch again: the new watch shows only what you may read now.",
        details={"group": GROUP, "kind": info.plural},
    )
