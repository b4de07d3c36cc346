"""Who may do what: Nodus's own identities first, then project roles for users.

The chain, as kube-apiserver's union of authorizers (ADR 0035): administrators (``system:masters``)
may do everything; a node agent is decided by the node authorizer (``nodus.api.auth.nodes``), a host
holding a bootstrap token may only exchange it for a node credential, and the controllers by their
table of rights (``nodus.api.auth.controllers``). Those identities never fall through to project
roles. Everyone else is a user:

A Project's ``spec.members`` lists ``{name, role}``; ``name`` is a user name, or ``group:<group>``
for everyone in a group. Roles are cumulative: **Viewer** may get, list and watch what the project
holds; **Editor** may also create, update, patch and delete it; **Owner** may also update the
Project itself (its members) and write the kinds that let someone in (``KindInfo.owners_write``:
Pools, whose join tokens admit hosts, ADR 0047). A member named ``group:<g>`` matches members of
group ``g`` only, never a user who happens to be named ``group:<g>``. Creating and deleting
Projects, and writing any ``/status``, is for administrators and the controllers. A cluster-wide
list or watch is narrowed to the projects the caller can read and reveals nothing about the others.

The other cluster-scoped kinds (Offering, Node, Lease) describe the installation, not a tenant:
every authenticated user may get, list and watch them, and only Nodus writes them. BootstrapTokens
are for administrators and the controllers only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import IntEnum
from typing import Any

from nodus.api.auth import controllers
from nodus.api.auth.nodes import Attributes, NodeAuthorizer, NodeGraph, refuse
from nodus.api.auth.principal import Principal
from nodus.api.errors import APIError
from nodus.api.registry import KindInfo

READ_VERBS = frozenset({"get", "list", "watch"})


class Role(IntEnum):
    NONE = 0
    VIEWER = 1
    EDITOR = 2
    OWNER = 3


ROLE_NAMES = {"Viewer": Role.VIEWER, "Editor": Role.EDITOR, "Owner": Role.OWNER}

ProjectLookup = Callable[[str], Awaitable[dict[str, Any] | None]]
ProjectsForPrincipal = Callable[[Principal], Awaitable[list[str]]]


def role_in(project: dict[str, Any] | None, principal: Principal) -> Role:
    """The caller's strongest role among a Project's members."""
    if project is None:
        return Role.NONE
    members = (project.get("spec") or {}).get("members") or []
    best = Role.NONE
    for member in members:
        if not isinstance(member, dict):
            continue
        name = member.get("name")
        if not isinstance(name, str):
            continue
        # "group:<g>" names a group only: a user who is literally called "group:<g>" is not its member.
        group = name.removeprefix("group:") if name.startswith("group:") else None
        if (group in principal.groups) if group is not None else name == principal.user:
            best = max(best, ROLE_NAMES.get(str(member.get("role")), Role.NONE))
    return best


def member_names(principal: Principal) -> list[str]:
    """The ``spec.members[].name`` values that refer to this caller."""
    return [principal.user, *(f"group:{g}" for g in principal.groups)]


def narrowed_by_project(info: KindInfo) -> bool:
    """Whether a caller's lists and watches of this kind show only the projects it may read: the
    namespaced kinds (by project) and Project itself (by name). Other cluster-scoped kinds are
    readable by every authenticated user and never narrowed."""
    return info.namespaced or info.kind == "Project"


def forbidden(
    principal: Principal, verb: str, info: KindInfo, project: str | None, needed: str, why: str = ""
) -> APIError:
    """A 403 naming ``verb`` (``update/status`` for a subresource) on ``info`` in ``project``."""
    verb, _, sub = verb.partition("/")
    return refuse(Attributes(principal, verb, info.plural, project, None, sub), needed, why)


def _read_only(principal: Principal, verb: str, info: KindInfo, project: str | None) -> APIError:
    return forbidden(
        principal,
        verb,
        info,
        project,
        f"{info.kind} objects are written only by Nodus; users may get, list and watch them.",
        why=f"{info.plural} are read-only",
    )


class Authorizer:
    """Decides each request; project documents are read through the injected lookups."""

    def __init__(self, project: ProjectLookup, projects_for: ProjectsForPrincipal, graph: NodeGraph) -> None:
        self._project = project
        self._projects_for = projects_for
        self.nodes = NodeAuthorizer(graph)

    async def system(self, attrs: Attributes) -> bool:
        """Decide for Nodus's own identities: True when allowed, a 403 when one of them is refused, False
        when the caller is a user (project roles, or the endpoint's own rule for users, decide)."""
        principal = attrs.principal
        if principal.is_admin:
            return True
        if principal.node_name is not None:
            await self.nodes.authorize(attrs)
            return True
        if principal.bootstrap_token is not None:
            if attrs.resource == "nodecredentials" and attrs.verb == "create":
                return True
            raise refuse(
                attrs,
                "A bootstrap token can only be exchanged for a node credential (nodus agent --join-token does it).",
                why="bootstrap tokens authenticate nothing else",
            )
        if principal.is_controller:
            controllers.authorize(attrs)
            return True
        return False

    async def authorize(
        self,
        principal: Principal,
        verb: str,
        info: KindInfo,
        namespace: str | None,
        name: str | None,
        subresource: str = "",
        seen: dict[str, dict[str, Any] | None] | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> None:
        """Raise a 403 Status unless ``principal`` may do ``verb``. Cluster-wide reads are allowed
        here and narrowed by :meth:`readable_projects`. Projects read are kept in ``seen``, so that the
        rest of the request (admission) need not read them again. The selectors matter to the node
        authorizer only (a node lists just the Attempts bound to it)."""
        attrs = Attributes(
            principal,
            verb,
            info.plural,
            namespace if info.namespaced else None,
            name,
            subresource,
            label_selector=label_selector,
            field_selector=field_selector,
        )
        if await self.system(attrs):
            return
        shown_verb = f"{verb}/{subresource}" if subresource else verb
        if subresource and verb not in READ_VERBS:
            raise forbidden(
                principal,
                shown_verb,
                info,
                namespace or name,
                f"Only administrators (group system:masters) and Nodus controllers write {subresource}.",
            )
        if info.kind == "Project":
            await self._authorize_project(principal, verb, info, name, seen)
            return
        if not info.namespaced:
            if verb in READ_VERBS and info.cluster_readable:
                return
            if not info.cluster_readable:
                raise forbidden(
                    principal, verb, info, None, f"Only administrators (group system:masters) use {info.plural}."
                )
            if not info.user_writable:
                raise _read_only(principal, verb, info, None)
            raise forbidden(
                principal, verb, info, None, f"Only administrators (group system:masters) write {info.plural}."
            )
        if namespace is None:
            if verb in ("list", "watch"):
                return
            raise forbidden(principal, verb, info, None, "Name a project with -n <project>.")
        if verb not in READ_VERBS and not info.user_writable:
            raise _read_only(principal, verb, info, namespace)
        needed = Role.VIEWER if verb in READ_VERBS else Role.OWNER if info.owners_write else Role.EDITOR
        role = role_in(await self._lookup(namespace, seen), principal)
        if role < needed:
            raise forbidden(principal, verb, info, namespace, _ask(namespace, principal, needed))

    async def role(self, principal: Principal, project: str) -> Role:
        """The caller's role in ``project`` (NONE when it does not exist): for endpoints with a rule of their own."""
        return role_in(await self._project(project), principal)

    async def _lookup(self, name: str, seen: dict[str, dict[str, Any] | None] | None) -> dict[str, Any] | None:
        if seen is None:
            return await self._project(name)
        if name not in seen:
            seen[name] = await self._project(name)
        return seen[name]

    async def _authorize_project(
        self,
        principal: Principal,
        verb: str,
        info: KindInfo,
        name: str | None,
        seen: dict[str, dict[str, Any] | None] | None,
    ) -> None:
        if verb in ("list", "watch") and name is None:
            return
        if verb in ("create", "delete", "deletecollection"):
            raise forbidden(principal, verb, info, name, "Only administrators create and delete projects.")
        assert name is not None
        needed = Role.VIEWER if verb in READ_VERBS else Role.OWNER
        if role_in(await self._lookup(name, seen), principal) < needed:
            raise forbidden(principal, verb, info, name, _ask(name, principal, needed))

    async def readable_projects(self, principal: Principal) -> list[str] | None:
        """None when the caller may read every project; otherwise the projects it may read. Nodus's own
        identities are not narrowed here: their authorizers decided what they may list (a node, only with
        its own label selector)."""
        if principal.is_system:
            return None
        return await self._projects_for(principal)


def _ask(project: str, principal: Principal, needed: Role) -> str:
    return (
        f'Ask an Owner of project "{project}" to add "{principal.user}" to spec.members with role '
        f"{needed.name.title()} or higher (kubectl edit project {project})."
    )
