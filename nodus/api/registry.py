"""Each kind is declared once; routes, discovery, OpenAPI and Table output are generated from it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from nodus.api.context import RequestContext
from nodus.api.strategy import Object, Strategy

GROUP = "nodus.dev"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"

Admission = Callable[[Object, RequestContext], Awaitable[None]]
"""A kind's admission: called on create after validation, with the request; may raise an APIError (a
Job's estimate and funding checks). It may read storage, unlike a strategy's synchronous hooks."""


@dataclass(frozen=True)
class PrinterColumn:
    """A column of ``kubectl get``: a JSONPath-like dotted path, or a function of the object."""

    name: str
    type: str  # string, integer, number, boolean, date
    path: str  # for documentation and OpenAPI, e.g. ".status.phase"
    description: str
    value: Callable[[Object], Any] | None = None
    priority: int = 0  # 0: always shown; 1: only with -o wide
    format: str = ""

    def extract(self, obj: Object) -> Any:
        if self.value is not None:
            return self.value(obj)
        current: Any = obj
        for part in self.path.strip(".").split("."):
            if not isinstance(current, dict):
                return None
            current = current.get(part)
        return current


@dataclass(frozen=True, eq=False)  # identity: a kind is declared once, and usable as a cache key
class KindInfo:
    """The declaration of one kind."""

    kind: str
    plural: str
    singular: str
    namespaced: bool
    description: str
    spec_model: type[BaseModel] | None
    status_model: type[BaseModel] | None
    strategy: Strategy
    printer_columns: tuple[PrinterColumn, ...]
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = True
    # Field selectors beyond metadata.name and metadata.namespace.
    selectable_fields: tuple[str, ...] = ()
    # Verbs users may use; a kind written only by controllers lists fewer.
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )
    # False for kinds written only by controllers: users may then only get, list and watch.
    user_writable: bool = True
    # True when only a project's Owners write the kind (Editors and Viewers read it): a Pool lets hosts into the
    # project, as its members list lets people in.
    owners_write: bool = False
    # False for cluster-scoped kinds that only administrators and the controllers may read (BootstrapToken).
    cluster_readable: bool = True
    # Names are RFC 1123 labels (at most 63 characters) rather than subdomains.
    dns_label_names: bool = False
    # A ``log`` subresource (plain text, like pods/log): Jobs and Attempts.
    has_log: bool = False
    # Server-side apply: list fields that merge by key, given as dotted paths -> key fields.
    list_map_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Fields at the top level besides apiVersion, kind, metadata, spec and status (Secret: type, data,
    # stringData), declared as a model whose fields are merged into the object's schema.
    top_level_model: type[BaseModel] | None = None
    # The object as clients see it, when that differs from what is stored (Secret: no values). Every
    # response path (get, list, watch, write responses, Tables) serves ``served(obj)``; it returns a
    # new object and never changes its argument. None: the stored object is served as it is.
    served: Callable[[Object], Object] | None = None
    # What the server checks on create beyond the strategy's rules, with the request (the Job's estimate);
    # a kind declared without one gets it when the server builds its registry (``catalog.registry``).
    admission: Admission | None = None

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def field_selectors(self) -> tuple[str, ...]:
        return ("metadata.name", "metadata.namespace", *self.selectable_fields)


class Registry:
    """The kinds this server serves, by plural and by kind."""

    def __init__(self) -> None:
        self._by_plural: dict[str, KindInfo] = {}
        self._by_kind: dict[str, KindInfo] = {}

    def register(self, info: KindInfo) -> None:
        if info.plural in self._by_plural or info.kind in self._by_kind:
            raise ValueError(f"kind {info.kind} is registered twice")
        self._by_plural[info.plural] = info
        self._by_kind[info.kind] = info

    def by_plural(self, plural: str) -> KindInfo | None:
        return self._by_plural.get(plural)

    def by_kind(self, kind: str) -> KindInfo | None:
        return self._by_kind.get(kind)

    def __iter__(self) -> Iterator[KindInfo]:
        return iter(sorted(self._by_plural.values(), key=lambda k: k.plural))

    def namespaced_kinds(self) -> list[str]:
        return [k.kind for k in self if k.namespaced]
