"""The Job ``nodus run`` submits: a manifest (``-f``) amended by flags, the flags winning.

What each flag replaces (the rest of the manifest is kept as written):

* ``--name`` → ``metadata.name``; with no name anywhere, one is derived from the command (the program's
  or its script's base name, reduced to a DNS-1123 label) plus a short random suffix, so that running
  the same command twice makes two Jobs rather than a conflict.
* ``--image`` → ``spec.image`` (when neither names one, :func:`with_default_image` fills in the image the
  server announces).
* ``--gpu TYPE:COUNT`` → ``spec.resources.gpu`` as a whole (``{type: [TYPE], count: COUNT}``): a GPU request
  is one thing, so a file's ``minMemory`` or ``exact`` does not silently survive a different type. ``TYPE``
  is a family (``H100``, any case) or a variant id (``h100-sxm-80g``) of the accelerator catalog that the
  server checks ``gpu.type`` against; ``COUNT`` is 1, 2, 4 or 8. A bare ``COUNT`` means any type the
  cluster offers: the caller passes those families (:func:`gpu_request`'s ``offered``).
* ``--cpu``, ``--memory`` → ``spec.resources.cpu`` / ``.memory``, checked as Kubernetes quantities here
  so that a typo is a one-line error before anything is uploaded.
* ``--completions`` → ``spec.completions``; ``-- COMMAND ARGS`` → ``spec.command``.

Everything here is pure (no I/O but reading the manifest's text, which the caller passes): the errors are
:class:`BuildError`, whose message is the one line the CLI prints.
"""

from __future__ import annotations

import copy
import re
import secrets
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

import yaml

from nodus.apimachinery.units import parse_quantity
from nodus.apis.v1 import accelerators

API_VERSION = "nodus.dev/v1"
GPU_COUNTS = (1, 2, 4, 8)
MAX_TYPES = 8  # spec.resources.gpu.type holds at most 8 entries
# Attempts are labelled with their Job's name (a label value: at most 63 characters) and named
# <job>-<index>-<n>: a derived name stays well below that.
_STEM_LENGTH = 40
_SUFFIX_LENGTH = 5
_INTERPRETERS = frozenset({"python", "python3", "bash", "sh", "node", "ruby", "perl", "torchrun", "accelerate", "uv"})


class BuildError(ValueError):
    """The file or a flag cannot make a Job; the message is one line naming the fix."""


@dataclass(frozen=True)
class Flags:
    """What ``nodus run``'s flags say about the Job (None: the flag was not given)."""

    name: str | None = None
    image: str | None = None
    gpu: str | None = None
    cpu: str | None = None
    memory: str | None = None
    completions: int | None = None
    command: Sequence[str] = field(default_factory=tuple)


def load_manifest(text: str, source: str) -> dict[str, Any]:
    """The one Job manifest in ``text`` (YAML or JSON); ``source`` names it in errors."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise BuildError(f"{source}: not YAML or JSON: {_first_line(str(exc))}") from None
    if len(documents) != 1:
        raise BuildError(f"{source}: expected one Job manifest, found {len(documents)} documents")
    manifest = documents[0]
    if not isinstance(manifest, dict):
        raise BuildError(f"{source}: expected a Job manifest (a mapping with kind: Job)")
    if manifest.get("kind", "Job") != "Job":
        raise BuildError(f"{source}: kind is {manifest.get('kind')!r}; nodus run runs a Job (kind: Job)")
    for key in ("metadata", "spec"):
        if not isinstance(manifest.get(key, {}), dict):
            raise BuildError(f"{source}: {key} must be a mapping")
    return manifest


def build(
    manifest: dict[str, Any] | None,
    flags: Flags,
    *,
    offered: Sequence[str] = (),
    suffix: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """A new Job: ``manifest`` (not modified) amended by ``flags``. ``offered`` are the GPU families a bare
    ``--gpu COUNT`` may use; ``suffix`` makes the random part of a derived name (tests pass their own)."""
    job = copy.deepcopy(manifest) if manifest is not None else {}
    job["apiVersion"] = job.get("apiVersion") or API_VERSION
    job["kind"] = "Job"
    metadata: dict[str, Any] = job.setdefault("metadata", {})
    spec: dict[str, Any] = job.setdefault("spec", {})
    if flags.image is not None:
        if not flags.image.strip():
            raise BuildError("--image is empty: name an image, e.g. --image python:3.11")
        spec["image"] = flags.image
    if flags.command:
        spec["command"] = list(flags.command)
    if flags.completions is not None:
        if flags.completions < 1:
            raise BuildError(f"--completions {flags.completions}: a Job runs at least one index (--completions 1)")
        spec["completions"] = flags.completions
    resources = spec.get("resources")
    if flags.gpu is not None or flags.cpu is not None or flags.memory is not None:
        resources = dict(resources) if isinstance(resources, dict) else {}
        if flags.gpu is not None:
            resources["gpu"] = gpu_request(flags.gpu, offered)
        if flags.cpu is not None:
            resources["cpu"] = quantity("--cpu", flags.cpu, "4 or 500m")
        if flags.memory is not None:
            resources["memory"] = quantity("--memory", flags.memory, "16Gi or 512Mi")
        spec["resources"] = resources
    if not spec.get("command"):
        raise BuildError("nothing to run: put the command after --, e.g. nodus run -- python train.py")
    if flags.name is not None:
        metadata["name"] = flags.name
    if not metadata.get("name") and not metadata.get("generateName"):
        metadata["name"] = derived_name(spec["command"], (suffix or random_suffix)())
    return job


def gpu_request(text: str, offered: Sequence[str] = ()) -> dict[str, Any]:
    """``spec.resources.gpu`` for ``--gpu TYPE:COUNT`` (or a bare ``COUNT``: the ``offered`` families)."""
    kind, colon, count_text = text.strip().rpartition(":")
    if not colon:
        kind, count_text = "", text.strip()
    try:
        count = int(count_text)
    except ValueError:
        raise BuildError(f"--gpu {text}: write TYPE:COUNT, e.g. --gpu H100:8 or --gpu L4:1") from None
    if count not in GPU_COUNTS:
        raise BuildError(f"--gpu {text}: the count is GPUs per host, one of 1, 2, 4 or 8")
    if not colon:
        if not offered:
            raise BuildError(f"--gpu {text}: this cluster offers no GPU hosts; name a type, e.g. --gpu H100:{count}")
        return {"type": list(dict.fromkeys(offered))[:MAX_TYPES], "count": count}
    family = accelerators.family_named(kind)
    if family is not None:
        return {"type": [family], "count": count}
    if kind in accelerators.VARIANT_IDS:
        return {"type": [kind], "count": count}
    known = ", ".join(accelerators.FAMILIES)
    raise BuildError(
        f"--gpu {text}: unknown GPU type {kind!r}; known types: {known} (or a variant id such as "
        f"{accelerators.VARIANT_IDS[0]})"
    )


def quantity(flag: str, text: str, example: str) -> str:
    """``text`` if it is a positive Kubernetes quantity, else a :class:`BuildError` for ``flag``."""
    try:
        value = parse_quantity(text)
    except ValueError:
        raise BuildError(f"{flag} {text}: not a quantity; write it like {example}") from None
    if value <= Decimal(0):
        raise BuildError(f"{flag} {text}: must be more than zero, e.g. {example}")
    return text.strip()


def with_default_image(job: dict[str, Any], default: str) -> dict[str, Any]:
    """``job`` with ``spec.image`` set to the server's ``default`` when neither the file nor ``--image``
    named one (``job`` is modified and returned)."""
    spec = job["spec"]
    if spec.get("image"):
        return job
    if not default:
        raise BuildError(
            "no image: the server announces no default image; pass --image IMAGE (or set spec.image in the file)"
        )
    spec["image"] = default
    return job


def derived_name(command: Sequence[str], suffix: str) -> str:
    """A Job name from the command: its script's (``python train.py`` → ``train``) or program's base name as a
    DNS-1123 label, then ``-`` and ``suffix``; ``job-<suffix>`` when nothing usable is left."""
    words = [str(word) for word in command]
    program = PurePosixPath(words[0]).name if words else ""
    stem = PurePosixPath(program).stem
    if program.lower().rstrip("0123456789.") in _INTERPRETERS:
        stem = program
        script = next((w for w in words[1:] if not w.startswith("-")), None)
        flags_before = words[1 : words.index(script)] if script is not None else words[1:]
        # python -c CODE / -m MODULE: the code is no name; the module is
        if script is not None and not any(f in ("-c", "-e") for f in flags_before):
            stem = PurePosixPath(script).stem if "-m" not in flags_before else script.rsplit(".", 1)[-1]
    label = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:_STEM_LENGTH].strip("-")
    return f"{label or 'job'}-{suffix}"


def random_suffix() -> str:
    """Five random lower-case letters and digits (a DNS-1123 label's characters)."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(_SUFFIX_LENGTH))


def _first_line(text: str) -> str:
    return " ".join(text.split())[:200]
