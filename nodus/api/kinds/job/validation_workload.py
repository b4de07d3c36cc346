"""Cross-field rules of the container a Job runs: image, command environment, code, secrets, egress, size.

Each rule takes the raw ``spec`` and its path and returns field errors; each skips what has the wrong
type, which the model validation has already reported. Messages name the fields involved and say
how to fix the request.
"""

from __future__ import annotations

from datetime import timedelta

from nodus.api.kinds.job.jsonview import JSONObject, as_int, as_object, as_str, child, is_set, objects
from nodus.api.kinds.job.rules import duplicates, exactly_one_of
from nodus.apimachinery import fieldpath, units
from nodus.apimachinery.fieldpath import FieldError, Path

MAX_PARALLELISM = 256
MAX_COMPLETIONS = 10000


def image_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """Exactly one of ``image`` (as written) and ``imageRef`` (digest-pinned), ADR 0046 §9."""
    return exactly_one_of(spec, path, ("image", "imageRef"), missing_at=path.child("image"))


def env_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """Env names unique within each list; each variable a literal value or a Secret key, not both."""
    errors = _env_list_rules(spec.get("env"), path.child("env"))
    for index, sidecar in objects(spec.get("sidecars")):
        errors.extend(_env_list_rules(sidecar.get("env"), path.child("sidecars").index(index).child("env")))
    return errors


def _env_list_rules(env: object, path: Path) -> list[FieldError]:
    errors = duplicates(env, path, "name")
    for index, variable in objects(env):
        item = path.index(index)
        if is_set(variable, "value") and is_set(variable, "valueFrom"):
            errors.append(
                fieldpath.forbidden(
                    item.child("valueFrom"),
                    f"may not be set together with {item.child('value')}: a variable is either a literal value or "
                    "a Secret key; remove one of them",
                )
            )
        elif not is_set(variable, "value") and not is_set(variable, "valueFrom"):
            errors.append(
                fieldpath.required(item.child("value"), "set value (it may be empty) or valueFrom.secretKeyRef")
            )
    return errors


def sidecar_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """Sidecar names are unique within the Job."""
    return duplicates(spec.get("sidecars"), path.child("sidecars"), "name")


def secret_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """Each Secret is mounted once (``secrets`` merges by name under server-side apply)."""
    return duplicates(spec.get("secrets"), path.child("secrets"), "name")


def source_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """``source`` is exactly one of ``git`` and ``blob``."""
    source = as_object(spec.get("source"))
    if source is None:
        return []
    return exactly_one_of(source, path.child("source"), ("git", "blob"))


def egress_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """``allow`` and ``presets`` extend an allow list, so they need ``policy: AllowList``, which needs one of them."""
    egress = child(spec, "network", "egress")
    if egress is None:
        return []
    egress_path = path.child("network", "egress")
    policy = as_str(egress.get("policy"))
    extensions = [key for key in ("allow", "presets") if isinstance(egress.get(key), list) and egress[key]]
    if policy == "AllowList" and not extensions:
        return [
            fieldpath.required(
                egress_path.child("allow"),
                "policy AllowList needs at least one allow entry or preset; use policy Deny to block all egress",
            )
        ]
    if policy not in ("Deny", "Open"):
        return []  # AllowList, or a policy the model refuses
    return [
        fieldpath.forbidden(
            egress_path.child(key),
            f"applies only with policy AllowList, and the policy is {policy}; set policy: AllowList or remove {key}",
        )
        for key in extensions
    ]


def size_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """``parallelism`` is at most ``completions`` (it is never clamped: a request above it is refused)."""
    completions = as_int(spec.get("completions"))
    parallelism = as_int(spec.get("parallelism"))
    if completions is None or parallelism is None or not 1 <= completions <= MAX_COMPLETIONS:
        return []
    if completions < parallelism <= MAX_PARALLELISM:
        return [
            fieldpath.invalid(
                path.child("parallelism"),
                parallelism,
                f"must be at most completions ({completions}): no more indexes can run at once than there are; "
                f"lower parallelism to {completions} or raise completions",
            )
        ]
    return []


def deadline_alias_rules(spec: JSONObject, path: Path) -> list[FieldError]:
    """``activeDeadlineSeconds`` left beside ``timeout`` means they disagreed (agreeing ones are folded)."""
    seconds = as_int(spec.get("activeDeadlineSeconds"))
    timeout = as_str(spec.get("timeout"))
    if seconds is None or seconds < 1 or timeout is None:
        return []
    try:
        written = units.parse_duration(timeout)
    except ValueError:
        return []  # the timeout itself is reported
    if written == timedelta(seconds=seconds):
        return []
    return [
        fieldpath.invalid(
            path.child("activeDeadlineSeconds"),
            seconds,
            f"disagrees with {path.child('timeout')} ({timeout}); activeDeadlineSeconds is an alias of timeout, "
            "so set only timeout",
        )
    ]
