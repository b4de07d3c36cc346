"""The generic store: the order of every write, the same for every kind.

create: system metadata, generateName, prepare, validate, admit (the project; the kind's admission,
such as the Job's estimate), field ownership, store.
update: read, precondition, carry system metadata, prepare, generation, validate, ownership, store.
patch: read, apply the patch to the current object, then update; retried on a concurrent write.
delete: preconditions, the kind's deletion check (a project that may not go), propagation finalizers,
then either mark (deletionTimestamp) or remove.

A kind contributes only its :class:`~nodus.api.strategy.Strategy`. Events are emitted by storage
in the same transaction as the write, so there is no separate emit step that could be lost; so are
the rows the strategy's ``companions`` hook names for a create or an update (a Job's progress sample).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nodus.api import errors, fieldmanagement, objectmeta
from nodus.api.context import RequestContext
from nodus.api.errors import APIError
from nodus.api.registry import API_VERSION, GROUP, KindInfo
from nodus.apimachinery import fieldpath
from nodus.apimachinery.causes import PROJECT_TERMINATING
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apimachinery.units import format_time, now
from nodus.storage import errors as storage_errors
from nodus.storage.errors import Key
from nodus.storage.objects import Storage

log = logging.getLogger(__name__)

Object = dict[str, Any]
PatchFunction = Callable[[Object], Object]
# How admission reads a Project (the server's in-memory view, nodus.api.projectview): None when there is none.
ProjectLookup = Callable[[str], Awaitable[Object | None]]
# A step of delete before anything is written, given the stored object: it may refuse the delete by raising an
# APIError (a project the server keeps) or add warnings (what goes with the object).
Deletion = Callable[[Object, RequestContext], Awaitable[None]]

FOREGROUND = "foregroundDeletion"
NODUS_PREFIX = "nodus.dev/"
ORPHAN = "orphan"
_GENERATE_NAME_TRIES = 8
# A patch without a precondition is re-applied to the newest object until it lands (kube-apiserver's
# GuaranteedUpdate loops likewise); the bound only stops a pathological storm, with a clear 409.
_PATCH_RETRIES = 128


class GenericStore:
    """The store of one kind."""

    def __init__(self, storage: Storage, info: KindInfo, project: ProjectLookup | None = None) -> None:
        """``project`` reads the Project a namespaced object is admitted to; the database when not given."""
        self.storage = storage
        self.info = info
        self._project = project or self._stored_project
        self.strategy = info.strategy
        self.deletion: Deletion | None = None

    # --- helpers -------------------------------------------------------------------------------

    async def _stored_project(self, name: str) -> Object | None:
        return await self.storage.get(Key("Project", "", name))

    def key(self, namespace: str | None, name: str) -> Key:
        return Key(self.info.kind, namespace or "", name)

    def _not_found(self, name: str) -> APIError:
        return errors.not_found(self.info.plural, GROUP, name)

    def _conflict(self, name: str) -> APIError:
        return errors.conflict(self.info.plural, GROUP, name)

    def _invalid(self, name: str, problems: list[FieldError]) -> APIError:
        return errors.invalid(self.info.kind, GROUP, name, problems)

    async def find(self, namespace: str | None, name: str) -> Object | None:
        """The stored object, or None when there is none."""
        return await self.storage.get(self.key(namespace, name))

    async def get(self, namespace: str | None, name: str) -> Object:
        """The stored object; a 404 Status when there is none."""
        obj = await self.find(namespace, name)
        if obj is None:
            raise self._not_found(name)
        return obj

    def _check_type(self, obj: Any, namespace: str | None) -> Object:
        if not isinstance(obj, dict):
            raise errors.bad_request(f"the body must be a {self.info.kind} object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version not in (None, API_VERSION) or kind not in (None, self.info.kind):
            raise errors.bad_request(
                f"the body is {kind or '?'} {api_version or '?'}, but this endpoint serves {self.info.kind} "
                f"{API_VERSION}",
                fix=f"Send apiVersion: {API_VERSION} and kind: {self.info.kind}, or use the endpoint of that kind.",
            )
        obj["apiVersion"], obj["kind"] = API_VERSION, self.info.kind
        metadata = obj.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise self._invalid("", [fieldpath.invalid(Path("metadata"), None, "must be an object")])
        if self.info.namespaced:
            body_namespace = metadata.get("namespace")
            if body_namespace and body_namespace != namespace:
                raise errors.bad_request(
                    f"the namespace of the provided object ({body_namespace}) does not match the namespace sent "
                    f"on the request ({namespace})"
                )
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        return obj

    def _validate(self, obj: Object, old: Object | None, subresource: str = "") -> None:
        name = str(obj["metadata"].get("name", ""))
        problems = objectmeta.validate_metadata(obj["metadata"], dns_label_names=self.info.dns_label_names)
        if subresource == "status":
            problems += (
                self.strategy.validate_status(obj) if old is None else self.strategy.validate_status_update(obj, old)
            )
        elif old is None:
            problems += self.strategy.validate(obj)
        else:
            problems += self.strategy.validate_update(obj, old)
        if problems:
            raise self._invalid(name, problems)

    async def _admit(self, obj: Object, ctx: RequestContext) -> None:
        """A namespaced object needs its project to exist and not to be on its way out."""
        if not self.info.namespaced:
            return
        project_name = obj["metadata"]["namespace"]
        if project_name in ctx.projects:  # read moments ago by authorisation: the request sees one version of it
            project = ctx.projects[project_name]
        else:
            project = await self._project(project_name)
        if project is None:
            raise APIError(
                "NotFound",
                f'projects.{GROUP} "{project_name}" not found',
                fix="Create the project first (an administrator: kubectl create -f project.yaml), or use -n with "
                "an existing project.",
                details={"name": project_name, "group": GROUP, "kind": "projects"},
            )
        if project["metadata"].get("deletionTimestamp"):
            message = f"unable to create new content in project {project_name} because it is being deleted"
            raise APIError(
                "Forbidden",
                message,
                fix="Wait until the project is gone and create it again, or use another project.",
                # As kube-apiserver's NamespaceTerminating cause: clients (the controllers) tell this expected
                # refusal from a missing right by it, not by the message.
                details={
                    "name": str(obj["metadata"].get("name") or ""),
                    "group": GROUP,
                    "kind": self.info.plural,
                    "causes": [{"reason": PROJECT_TERMINATING, "message": message, "field": "metadata.namespace"}],
                },
            )

    def _own(self, old: Object | None, new: Object, ctx: RequestContext, subresource: str = "") -> None:
        managed = fieldmanagement.update_managed_fields(
            old,
            new,
            manager=ctx.field_manager,
            api_version=API_VERSION,
            list_keys=self.info.list_map_keys,
            now=format_time(now()),
            subresource=subresource,
        )
        if managed:
            new["metadata"]["managedFields"] = managed
        else:
            new["metadata"].pop("managedFields", None)

    # --- create --------------------------------------------------------------------------------

    async def create(self, namespace: str | None, body: Any, ctx: RequestContext, owned: bool = False) -> Object:
        obj = self._check_type(body, namespace)
        metadata = obj["metadata"]
        prefix = metadata.get("generateName")
        if not metadata.get("name") and isinstance(prefix, str) and prefix:
            metadata["name"] = objectmeta.generate_name(prefix)
        objectmeta.stamp_new(metadata)
        _guard_nodus_finalizers(self.info, obj, None, ctx)
        self.strategy.prepare_for_create(obj)
        self._validate(obj, None)
        await self._admit(obj, ctx)
        if self.info.admission is not None:
            await self.info.admission(obj, ctx)
        for message in self.strategy.warnings_on_create(obj):
            ctx.warn(message)
        if not owned:
            self._own(None, obj, ctx)
        if ctx.dry_run:
            return obj
        for attempt in range(_GENERATE_NAME_TRIES):
            try:
                key = self.key(namespace, metadata["name"])
                return await self.storage.create(key, obj, self.strategy.companions(obj, None))
            except storage_errors.AlreadyExists:
                if not prefix or body.get("metadata", {}).get("name") or attempt == _GENERATE_NAME_TRIES - 1:
                    raise errors.already_exists(self.info.plural, GROUP, metadata["name"]) from None
                metadata["name"] = objectmeta.generate_name(prefix)
        raise AssertionError("unreachable")  # pragma: no cover

    # --- update --------------------------------------------------------------------------------

    def _prepare_update(self, new: Object, old: Object, subresource: str) -> Object:
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status")
            if merged["status"] is None:
                merged.pop("status")
            merged["metadata"]["managedFields"] = new["metadata"].get(
                "managedFields", old["metadata"].get("managedFields")
            )
            return merged
        objectmeta.carry_system_fields(new["metadata"], old["metadata"])
        self.strategy.prepare_for_update(new, old)
        if self.strategy.spec_changed(new, old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation", 1)) + 1
        return new

    def _check_finalizers(self, new: Object, old: Object) -> None:
        if not old["metadata"].get("deletionTimestamp"):
            return
        added = set(new["metadata"].get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
        if added:
            raise self._invalid(
                new["metadata"]["name"],
                [
                    fieldpath.forbidden(
                        Path("metadata", "finalizers"),
                        "no new finalizers can be added if the object is being deleted, "
                        f"found new finalizers {sorted(added)}",
                    )
                ],
            )

    async def _write(self, new: Object, old: Object, ctx: RequestContext) -> Object:
        """Store ``new`` over ``old``, or finish the deletion when the last finalizer went."""
        if _same(new, old):
            return old
        key = self.key(new["metadata"].get("namespace"), new["metadata"]["name"])
        expected = int(old["metadata"]["resourceVersion"])
        if ctx.dry_run:
            return new
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            return await self.storage.delete(key, new, expected)
        return await self.storage.update(key, new, expected, self.strategy.companions(new, old))

    async def update(
        self, namespace: str | None, name: str, body: Any, ctx: RequestContext, subresource: str = ""
    ) -> Object:
        """PUT: replace the object; its resourceVersion is the precondition (409 when stale)."""
        new = self._check_type(body, namespace)
        body_name = new["metadata"].get("name")
        if body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        rv = new["metadata"].get("resourceVersion")
        if not rv:
            raise self._invalid(
                name,
                [
                    fieldpath.invalid(
                        Path("metadata", "resourceVersion"),
                        0,
                        "must be specified for an update",
                    )
                ],
            )
        # The body's resourceVersion is the precondition: a replacement is a patch that never retries.
        return await self.patch(namespace, name, lambda _: new, ctx, subresource)

    async def patch(
        self,
        namespace: str | None,
        name: str,
        patch: PatchFunction,
        ctx: RequestContext,
        subresource: str = "",
        owned: bool = False,
    ) -> Object:
        """Apply ``patch`` to the current object and update, re-reading and retrying when another
        write lands in between; a resourceVersion the patch itself sets is a precondition."""
        for _ in range(_PATCH_RETRIES):
            old = await self.get(namespace, name)
            # The patch is applied without the current resourceVersion, so that one it sets itself
            # (a precondition) can be told from the one it merely carried over.
            base = copy.deepcopy(old)
            del base["metadata"]["resourceVersion"]
            patched = patch(base)
            new = self._check_type(patched, namespace)
            if new["metadata"].get("name") != name:
                raise errors.bad_request("a patch may not change metadata.name")
            wanted_rv = new["metadata"].get("resourceVersion")
            if wanted_rv and str(wanted_rv) != old["metadata"]["resourceVersion"]:
                raise self._conflict(name)
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            new = self._prepare_update(new, old, subresource)
            _guard_nodus_finalizers(self.info, new, old, ctx)
            self._check_finalizers(new, old)
            self._validate(new, old, subresource)
            for message in self.strategy.warnings_on_update(new, old) if not subresource else []:
                ctx.warn(message)
            if not owned:
                self._own(old, new, ctx, subresource)
            try:
                return await self._write(new, old, ctx)
            except storage_errors.Conflict:
                if wanted_rv:
                    raise self._conflict(name) from None
                continue
            except storage_errors.NotFound:
                raise self._not_found(name) from None
        raise APIError("Conflict", f'{self.info.plural}.{GROUP} "{name}": too many concurrent writes; retry')

    # --- delete --------------------------------------------------------------------------------

    async def delete(
        self, namespace: str | None, name: str, options: dict[str, Any], ctx: RequestContext
    ) -> tuple[Object, bool]:
        """Delete; returns the object and whether it is gone (False: waiting on finalizers)."""
        for _ in range(_PATCH_RETRIES):
            old = await self.get(namespace, name)
            _check_preconditions(old, options.get("preconditions") or {}, self._conflict(name))
            if self.deletion is not None:
                await self.deletion(old, ctx)
            new = copy.deepcopy(old)
            metadata = new["metadata"]
            finalizers: list[str] = list(metadata.get("finalizers") or [])
            policy = options.get("propagationPolicy")
            if policy == "Foreground" and FOREGROUND not in finalizers:
                finalizers.append(FOREGROUND)
            elif policy == "Orphan" and ORPHAN not in finalizers:
                finalizers.append(ORPHAN)
            key = self.key(namespace, name)
            expected = int(old["metadata"]["resourceVersion"])
            try:
                if not finalizers:
                    if ctx.dry_run:
                        return old, True
                    return await self.storage.delete(key, new, expected), True
                if finalizers != (metadata.get("finalizers") or []) or not metadata.get("deletionTimestamp"):
                    metadata["finalizers"] = finalizers
                    metadata.setdefault("deletionTimestamp", format_time(now()))
                    metadata.setdefault("deletionGracePeriodSeconds", int(options.get("gracePeriodSeconds") or 0))
                    if ctx.dry_run:
                        return new, False
                    return await self.storage.update(key, new, expected), False
                return old, False
            except storage_errors.Conflict:
                continue
            except storage_errors.NotFound:
                raise self._not_found(name) from None
        raise APIError("Conflict", f'{self.info.plural}.{GROUP} "{name}": too many concurrent writes; retry')


def _guard_nodus_finalizers(info: KindInfo, new: Object, old: Object | None, ctx: RequestContext) -> None:
    """Finalizers named ``nodus.dev/...`` are Nodus's own (storage charges, a Job's running attempts, a
    project's contents): only administrators and the controllers add or remove them (ADR 0035). A user
    stripping one would skip charges or make running attempts vanish unbilled."""
    if ctx.principal.is_admin or ctx.principal.is_controller:
        return
    before = {f for f in (old or {}).get("metadata", {}).get("finalizers") or [] if str(f).startswith(NODUS_PREFIX)}
    after = {f for f in new["metadata"].get("finalizers") or [] if str(f).startswith(NODUS_PREFIX)}
    if before == after:
        return
    changed = sorted(before ^ after)
    verb = "remove" if before - after else "add"
    raise APIError(
        "Forbidden",
        f'User "{ctx.principal.user}" cannot {verb} finalizer {changed[0]} of {info.kind} '
        f'"{new["metadata"].get("name")}": finalizers named {NODUS_PREFIX}* are managed by Nodus',
        fix="Leave metadata.finalizers' nodus.dev/ entries as they are: Nodus removes each once its work is done "
        "(delete the object and it goes when they are gone).",
        details={"name": new["metadata"].get("name"), "group": GROUP, "kind": info.plural},
    )


def _check_preconditions(obj: Object, preconditions: dict[str, Any], conflict: APIError) -> None:
    uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
    if uid and uid != obj["metadata"].get("uid"):
        conflict.message = (
            f"{conflict.message.split(':')[0]}: Precondition failed: UID in precondition: {uid}, "
            f"UID in object meta: {obj['metadata'].get('uid')}"
        )
        raise conflict
    if rv and str(rv) != obj["metadata"].get("resourceVersion"):
        conflict.message = (
            f"{conflict.message.split(':')[0]}: Precondition failed: ResourceVersion in "
            f"precondition: {rv}, ResourceVersion in object meta: "
            f"{obj['metadata'].get('resourceVersion')}"
        )
        raise conflict


def _same(new: Object, old: Object) -> bool:
    """A write that changes nothing but bookkeeping is not stored (no new resourceVersion)."""

    def strip(obj: Object) -> Object:
        out = dict(obj)
        metadata = dict(out.get("metadata") or {})
        metadata.pop("resourceVersion", None)
        metadata.pop("managedFields", None)
        out["metadata"] = metadata
        return out

    if strip(new) != strip(old):
        return False
    return _managers(new) == _managers(old)


def _managers(obj: Object) -> list[tuple[Any, ...]]:
    return [
        (m.get("manager"), m.get("operation"), m.get("subresource"), str(m.get("fieldsV1")))
        for m in obj["metadata"].get("managedFields") or []
    ]
