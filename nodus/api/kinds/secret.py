"""Secret (``secrets.nodus.dev/v1``): versioned values, sealed at rest, never served (ADR-0013).

Written like a Kubernetes Secret: ``type`` (default ``Opaque``), ``data`` (key -> base64) and/or
``stringData`` (key -> text, merged over ``data``). What is stored and what is served differ:

* stored: ``type``, ``sealed`` and ``status``. ``sealed.versions`` holds every kept version as
  ``{"version": n, "keyID": k, "kdf": "hkdf-sha256/secrets", "createdTime": t, "values": {key: {"nonce":
  b64, "ciphertext": b64}}}``, each value sealed with AES-256-GCM (``nodus.apimachinery.sealing``) under
  the Secrets' HKDF subkey of key ``k`` (ADR 0035; a version without ``kdf`` was sealed with the key itself,
  before subkeys, and still opens; ``nodus secrets reseal`` moves every version to the active key) and
  associated data
  ``nodus.dev/Secret, uid, version, key``: a ciphertext moved to another Secret, version or key
  does not open.
* served (:func:`served`, the kind's ``KindInfo.served``): ``type`` and ``status: {version, keys,
  versions: [{version, keys, createdTime}]}``; never ``data``, ``stringData`` or ``sealed``. Values
  are read back only through the values endpoint (``nodus.api.http.secrets``), by administrators.

Versions: a create makes version 1; an update that sends ``data``/``stringData`` whose values differ
from the current version's makes the next version (the sent values replace the old ones); an update
that sends neither keeps the values, so ``kubectl apply`` of a file without ``data``, ``kubectl
label`` or a read-modify-write of the served form never wipes them.

Old versions are kept while a Job may read them: the controllers keep the annotation
``nodus.dev/pinned-versions`` on each Secret a Job pins ("1,3": the versions pinned by Jobs that
have not finished), and every write drops the old versions it does not name once superseded for
``PRUNE_GRACE``; the latest version always stays. A Secret without the annotation keeps its
versions. ``MAX_VERSIONS`` bounds them in any case. A Secret deleted and recreated has a new uid, so
a Job that pinned (uid, version) notices.

The process's :class:`~nodus.apimachinery.sealing.Keyring` is given once at API server start with
:func:`configure`. Without one, a write that has values to seal is refused with a 503 Status: the
one exception to "preparers never raise", since it is the server's configuration, not the object,
that is at fault. Validation errors never carry a value (the value of a field error is left out).
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import itertools
import json
import re
from datetime import timedelta
from typing import Any

from nodus.api.errors import APIError
from nodus.api.fieldmanagement import gojson
from nodus.api.fieldmanagement.lastapplied import LAST_APPLIED_ANNOTATION
from nodus.api.registry import KindInfo, PrinterColumn
from nodus.api.strategy import Object, Strategy
from nodus.apimachinery import fieldpath
from nodus.apimachinery.fieldpath import FieldError, Path
from nodus.apimachinery.sealing import Keyring, OpenError, Sealed
from nodus.apimachinery.units import format_time, now, time_or_none
from nodus.apis.v1 import labels
from nodus.apis.v1.secret import MAX_VERSIONS, SecretFields, SecretStatus

MAX_BYTES = 1024 * 1024
# A version superseded this recently is kept even if no Job pins it yet: a Job admitted a moment
# before the new version may not have reached the controllers' view.
PRUNE_GRACE = timedelta(minutes=10)
KEY_PATTERN = re.compile(r"^[-._a-zA-Z0-9]+$")
MAX_KEY_LENGTH = 253
MAX_TYPE_LENGTH = 253
DEFAULT_TYPE = "Opaque"
# Secret values are sealed under the key file's HKDF subkeys for this purpose (recorded as "kdf" on each version).
PURPOSE = "secrets"
KDF = "hkdf-sha256/secrets"
_VALUE_FIELDS = ("data", "stringData")


def require(ring: Keyring | None) -> Keyring:
    """``ring``, or a 503 Status when the server was started without one."""
    if ring is None:
        raise APIError(
            "ServiceUnavailable",
            "this API server was started without --secret-key-file, so it cannot seal or open Secret values",
            fix="Start the API server with --secret-key-file FILE (one '<key id> <base64 of 32 bytes>' per "
            "line; `nodus dev` creates <data dir>/secret-keys).",
        )
    return ring


# --- the served form ---------------------------------------------------------------------------


def served(obj: Object) -> Object:
    """The object as clients see it: no ``sealed``, ``data`` or ``stringData``, and no values in the
    last-applied annotation. Returns a copy; ``obj`` is not changed."""
    out = {k: v for k, v in obj.items() if k not in ("sealed", *_VALUE_FIELDS)}
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        out["metadata"] = dict(metadata)
        _strip_last_applied(out)
        managed = metadata.get("managedFields")
        if isinstance(managed, list):  # a write's manager owns the sealed field it caused: not shown
            out["metadata"]["managedFields"] = [_without_sealed(entry) for entry in managed]
    return out


def _without_sealed(entry: Any) -> Any:
    fields = entry.get("fieldsV1") if isinstance(entry, dict) else None
    if not isinstance(fields, dict) or "f:sealed" not in fields:
        return entry
    return {**entry, "fieldsV1": {k: v for k, v in fields.items() if k != "f:sealed"}}


def _strip_last_applied(obj: Object) -> None:
    """Drop the values from kubectl's last-applied annotation (client-side and server-side apply write it)."""
    annotations = obj["metadata"].get("annotations")
    if not isinstance(annotations, dict):
        return
    text = annotations.get(LAST_APPLIED_ANNOTATION)
    if not isinstance(text, str) or not any(f'"{name}"' in text for name in _VALUE_FIELDS):
        return
    try:
        applied = json.loads(text)
    except ValueError:
        applied = None
    annotations = dict(annotations)
    if isinstance(applied, dict):
        for name in _VALUE_FIELDS:
            applied.pop(name, None)
        annotations[LAST_APPLIED_ANNOTATION] = gojson.dumps(applied) + "\n"
    else:  # unreadable: it may hold anything, so it goes
        del annotations[LAST_APPLIED_ANNOTATION]
    obj["metadata"]["annotations"] = annotations


# --- values --------------------------------------------------------------------------------------


def _values(obj: Object) -> tuple[dict[str, bytes] | None, list[FieldError]]:
    """The values an object carries (None when it sends neither data nor stringData), and every problem
    with them. Problems name the field and never include the value."""
    if all(obj.get(name) is None for name in _VALUE_FIELDS):
        return None, []
    values: dict[str, bytes] = {}
    problems: list[FieldError] = []
    for name in _VALUE_FIELDS:
        raw = obj.get(name)
        if raw is None:
            continue
        if not isinstance(raw, dict):
            problems.append(
                FieldError(fieldpath.ErrorType.TYPE_INVALID, name, "must be an object of key: value strings")
            )
            continue
        for key, value in raw.items():
            path = Path(name).key(str(key))
            if not isinstance(key, str) or not KEY_PATTERN.match(key) or len(key) > MAX_KEY_LENGTH:
                problems.append(
                    fieldpath.invalid(
                        path,
                        None,
                        f"a key must consist of alphanumeric characters, '-', '_' or '.' (at most {MAX_KEY_LENGTH})",
                    )
                )
                continue
            if not isinstance(value, str):
                problems.append(FieldError(fieldpath.ErrorType.TYPE_INVALID, str(path), "must be a string"))
                continue
            if name == "data":
                try:
                    values[key] = base64.b64decode(value, validate=True)
                except (binascii.Error, ValueError):
                    problems.append(
                        fieldpath.invalid(
                            path, None, "must be base64 (standard alphabet, padded); put plain text under stringData"
                        )
                    )
            else:
                values[key] = value.encode()
    total = sum(len(k) + len(v) for k, v in values.items())
    if total > MAX_BYTES:
        problems.append(
            fieldpath.forbidden(
                Path("data"), f"the values total {total} bytes; a Secret holds at most {MAX_BYTES} (1 MiB)"
            )
        )
    return values, problems


def _associated(uid: str, version: int, key: str) -> bytes:
    return b"\x00".join((b"nodus.dev/Secret", uid.encode(), str(version).encode(), key.encode()))


@functools.lru_cache(maxsize=8)
def _sealing(ring: Keyring) -> Keyring:
    """The Secrets' own subkeys of the key file (ADR 0035): nothing else sealed or signed with the file opens here."""
    return ring.derive(PURPOSE)


def _seal(
    ring: Keyring, uid: str, version: int, values: dict[str, bytes], created: str | None = None
) -> dict[str, Any]:
    sealing = _sealing(ring)
    sealed: dict[str, Any] = {}
    for key in sorted(values):
        box = sealing.seal(values[key], _associated(uid, version, key))
        if box.key_id != sealing.active_id:  # pragma: no cover - one active key per keyring
            raise AssertionError("sealed under an inactive key")
        sealed[key] = {"nonce": box.nonce_b64, "ciphertext": box.ciphertext_b64}
    return {
        "version": version,
        "keyID": sealing.active_id,
        "kdf": KDF,
        "createdTime": created or format_time(now()),
        "values": sealed,
    }


def reseal(ring: Keyring, obj: Object) -> tuple[Object, int]:
    """``obj`` (a stored Secret) with every version sealed again under the active key's Secret subkey, and how
    many versions changed; values and version numbers stay. What ``nodus secrets reseal`` runs after a key is
    added, so that the old key can leave the key file. :class:`OpenError` when a version does not open."""
    out = copy.deepcopy(obj)
    uid, changed = str(obj["metadata"]["uid"]), 0
    resealed: list[dict[str, Any]] = []
    for entry in versions(obj):
        if entry.get("kdf") == KDF and entry.get("keyID") == ring.active_id:
            resealed.append(entry)
            continue
        values = open_version(ring, obj, int(entry["version"])) or {}
        resealed.append(_seal(ring, uid, int(entry["version"]), values, created=entry.get("createdTime")))
        changed += 1
    out["sealed"] = {**(obj.get("sealed") or {}), "versions": resealed}
    return out, changed


def versions(obj: Object) -> list[dict[str, Any]]:
    """The stored (sealed) versions of a stored Secret, oldest first."""
    return list(((obj.get("sealed") or {}).get("versions")) or [])


def open_version(ring: Keyring, obj: Object, version: int) -> dict[str, bytes] | None:
    """The values of ``version`` of a stored Secret; None when that version is not kept.
    :class:`~nodus.apimachinery.sealing.OpenError` when a value does not open."""
    uid = str(obj["metadata"]["uid"])
    for entry in versions(obj):
        if entry.get("version") == version:
            key_id = str(entry.get("keyID"))
            # Versions sealed before the Secrets had their own subkey were sealed with the file's keys themselves.
            opener = _sealing(ring) if entry.get("kdf") == KDF else ring
            return {
                key: opener.open(Sealed(key_id, box["nonce"], box["ciphertext"]), _associated(uid, version, key))
                for key, box in (entry.get("values") or {}).items()
            }
    return None


def _status(sealed_versions: list[dict[str, Any]]) -> dict[str, Any]:
    listed = [
        {"version": v["version"], "keys": sorted(v.get("values") or {}), "createdTime": v.get("createdTime")}
        for v in sealed_versions
    ]
    current = listed[-1] if listed else {"version": 0, "keys": []}
    return {"version": current["version"], "keys": current["keys"], "versions": listed}


def _unreadable(name: str) -> APIError:
    # The cause (a key missing from the key file, or tampering) is for the server log, not the client.
    return APIError(
        "InternalError",
        f'secrets.nodus.dev "{name}": the current values cannot be opened with this server\'s secret key file',
        fix="An administrator: check that --secret-key-file holds every key that sealed stored values.",
    )


def pinned_versions(obj: Object) -> set[int] | None:
    """The versions named by the ``labels.PINNED_VERSIONS`` (None: no annotation, keep every version)."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(labels.PINNED_VERSIONS)
    if text is None:
        return None
    return {int(part) for part in str(text).split(",") if part.strip().isdigit()}


def _without_unpinned(kept: list[dict[str, Any]], obj: Object) -> list[dict[str, Any]]:
    """``kept`` less the old versions no Job pins any more (see the module docstring)."""
    pinned = pinned_versions(obj)
    if pinned is None or len(kept) < 2:
        return kept
    cutoff = now() - PRUNE_GRACE
    out: list[dict[str, Any]] = []
    for entry, successor in itertools.pairwise(kept):
        superseded = time_or_none(successor.get("createdTime"))
        if int(entry["version"]) in pinned or superseded is None or superseded > cutoff:
            out.append(entry)
    return [*out, kept[-1]]


class SecretStrategy(Strategy):
    """Seals values in the prepare hooks with ``keyring`` (the server's; None: writes of values answer 503);
    ``sealed`` and ``status`` are the server's, never the client's."""

    def __init__(self, keyring: Keyring | None = None) -> None:
        self.keyring = keyring

    def prepare_for_create(self, obj: Object) -> None:
        obj.pop("status", None)
        obj.pop("sealed", None)
        if obj.get("type") is None:
            obj["type"] = DEFAULT_TYPE
        _strip_last_applied(obj)
        values, problems = _values(obj)
        if problems:
            return  # left for validate to report
        ring = require(self.keyring)
        entry = _seal(ring, str(obj["metadata"]["uid"]), 1, values or {})
        for name in _VALUE_FIELDS:
            obj.pop(name, None)
        obj["sealed"] = {"versions": [entry]}
        obj["status"] = _status([entry])

    def prepare_for_update(self, new: Object, old: Object) -> None:
        new.pop("sealed", None)
        kept = versions(old)
        if new.get("type") is None:
            new["type"] = old.get("type") or DEFAULT_TYPE
        _strip_last_applied(new)
        values, problems = _values(new)
        if values is not None and not problems:
            ring = require(self.keyring)
            name = str(old["metadata"].get("name"))
            current_version = int(kept[-1]["version"]) if kept else 0
            try:
                current = open_version(ring, old, current_version) if kept else None
            except OpenError:
                raise _unreadable(name) from None
            if values != current:
                kept = [*kept, _seal(ring, str(old["metadata"]["uid"]), current_version + 1, values)]
                kept = kept[-MAX_VERSIONS:]
        kept = _without_unpinned(kept, new)
        if not problems:
            for field in _VALUE_FIELDS:
                new.pop(field, None)
        new["sealed"] = {"versions": copy.deepcopy(kept)}
        new["status"] = _status(kept)

    def validate(self, obj: Object) -> list[FieldError]:
        problems: list[FieldError] = []
        kind = obj.get("type")
        if not isinstance(kind, str) or not kind or len(kind) > MAX_TYPE_LENGTH:
            problems.append(
                fieldpath.invalid(Path("type"), None, f"must be a non-empty string of at most {MAX_TYPE_LENGTH}")
            )
        _, value_problems = _values(obj)  # only values that failed to seal are still here
        return problems + value_problems

    def validate_update(self, new: Object, old: Object) -> list[FieldError]:
        problems = self.validate(new)
        if new.get("type") != old.get("type"):
            problems.append(fieldpath.invalid(Path("type"), new.get("type"), "field is immutable"))
        return problems

    def spec_changed(self, new: Object, old: Object) -> bool:
        """A Secret has no spec: its generation moves with its values' version."""
        return (new.get("status") or {}).get("version") != (old.get("status") or {}).get("version")


def _key_count(obj: Object) -> int:
    return len((obj.get("status") or {}).get("keys") or [])


SECRET = KindInfo(
    kind="Secret",
    plural="secrets",
    singular="secret",
    namespaced=True,
    description="Secret holds versioned values (credentials, tokens), sealed at rest. Values are write-only: "
    "responses show the keys and versions, never the values; Jobs pin a (uid, version).",
    spec_model=None,
    status_model=SecretStatus,
    strategy=SecretStrategy(),
    printer_columns=(
        PrinterColumn("Type", "string", ".type", "Type is a hint for consumers, such as Opaque."),
        PrinterColumn("Keys", "integer", ".status.keys", "How many values the current version holds.", _key_count),
        PrinterColumn("Version", "integer", ".status.version", "Version is the current version."),
        PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the secret was created."),
    ),
    categories=("nodus",),
    has_status=False,
    top_level_model=SecretFields,
    served=served,
)
