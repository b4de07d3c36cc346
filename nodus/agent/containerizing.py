"""From a pinned Attempt and its pulled image to what the container runtime runs (ADR 0040, ADR 0042).

Kubernetes' rules for a container, applied to the image's config (``nodus.agent.images.Image``):

* **argv** (:func:`argv_for`): ``command`` replaces the image's ENTRYPOINT and ``args`` its CMD. ``command`` alone
  runs without the image's CMD; ``args`` alone runs the image's ENTRYPOINT with them; neither runs ENTRYPOINT + CMD.
* **environment** (:func:`environment_for`): the image's ENV first, then the Nodus contract (``NODUS_*`` and the
  Job's ``env``, ``nodus.agent.contract``), which wins, except that the image's ``PATH`` is kept unless the Job sets
  one: an image's interpreters live on its own PATH (``/opt/conda/bin``).
* **working directory** (:func:`working_dir_for`): ``spec.workingDir`` when set (backed by the attempt's writable
  working directory, where a ``source`` is checked out); unset, the image's WORKDIR, in the image's own filesystem,
  unless the Job has a ``source``, which is checked out there; an image without WORKDIR runs in ``/workspace``.
* **user**: the image's USER runs the program (the engine's default); ``status.image.user`` reports it.
* **limits** (:func:`limits_for`): ``resources.cpu``, ``memory`` and ``disk`` are enforced as limits, and a pids
  limit always applies (a fork bomb stays in its container).

Pull credentials come from the Job's ``imagePullSecrets`` only, at the versions pinned at admission
(:func:`pull_credentials`).
"""

from __future__ import annotations

import base64
import binascii
from decimal import Decimal
from typing import Any

from nodus.agent import images
from nodus.agent.contract import DEFAULT_WORKING_DIR
from nodus.agent.runtime import Limits
from nodus.apimachinery import imagerefs, units
from nodus.apis.v1.attempt import AttemptSpec
from nodus.client import Client, errors

Object = dict[str, Any]

# Processes (and threads) one container may hold: generous for data loaders, fatal to a fork bomb.
DEFAULT_PIDS_LIMIT = 16384


class NoCommand(Exception):
    """Neither the Job nor the image says what to run."""


def argv_for(spec: AttemptSpec, image: images.Image) -> list[str]:
    """The program's argv by Kubernetes' command/args rules over the image's ENTRYPOINT/CMD; NoCommand if empty."""
    command, args = spec.command, spec.args
    if command:
        argv = [*command, *(args or [])]
    elif args:
        argv = [*image.entrypoint, *args]
    else:
        argv = [*image.entrypoint, *image.cmd]
    if not argv:
        raise NoCommand(
            f"The image {image.reference} has neither ENTRYPOINT nor CMD, and the Job sets no command: set "
            "spec.command (or build the image with an ENTRYPOINT)."
        )
    return [str(arg) for arg in argv]


def environment_for(image: images.Image, contract: dict[str, str], spec: AttemptSpec) -> dict[str, str]:
    """The image's ENV, then the contract (which wins), keeping the image's PATH unless the Job sets PATH."""
    env = {**image.env, **contract}
    job_names = {item.name for item in spec.env or ()}
    if "PATH" in image.env and "PATH" not in job_names:
        env["PATH"] = image.env["PATH"]
    return env


def working_dir_for(spec: AttemptSpec, image: images.Image | None) -> tuple[str, bool]:
    """``(working directory, whether the attempt's writable working directory is bound there)``."""
    if spec.working_dir:
        return spec.working_dir, True
    own = image.working_dir if image is not None else ""
    if own and own != "/":
        return own, spec.source is not None
    return DEFAULT_WORKING_DIR, True


def limits_for(spec: AttemptSpec) -> Limits:
    resources = spec.resources
    cpu, memory, disk = (resources.cpu, resources.memory, resources.disk) if resources else (None, None, None)
    return Limits(
        cpus=float(units.parse_quantity(cpu)) if cpu is not None else None,
        memory_bytes=_bytes(memory),
        pids=DEFAULT_PIDS_LIMIT,
        disk_bytes=_bytes(disk),
    )


def _bytes(quantity: object) -> int | None:
    if quantity is None:
        return None
    value = units.parse_quantity(str(quantity))
    return int(value.to_integral_value()) if value > Decimal(0) else None


def image_status(image: images.Image) -> Object:
    """``status.image`` of the Attempt (and so of the Job): the reference as written, the digest and the user."""
    return {"reference": image.reference, "digest": image.digest, "user": image.user or "root"}


def pinned_digest(spec: AttemptSpec) -> str | None:
    """The digest every attempt of the Job runs: ``imageRef``'s, or the one the Job controller pinned."""
    try:
        return imagerefs.parse(spec.image or "").digest
    except imagerefs.InvalidReference:
        return None


async def pull_credentials(
    client: Client, namespace: str, spec: AttemptSpec, registry: str
) -> images.Credentials | None:
    """The registry credentials of the Job's ``imagePullSecrets`` (at their pinned versions) for ``registry``."""
    names = list(spec.image_pull_secrets or ())
    if not names:
        return None
    pins = {pin.name: pin for pin in spec.secrets or ()}
    found: list[dict[str, bytes]] = []
    for name in names:
        pin = pins.get(name)
        params = {"version": str(pin.version), "uid": pin.uid} if pin else {}
        path = f"/apis/nodus.dev/v1/namespaces/{namespace}/secrets/{name}/values"
        try:
            response = await client.request("GET", path, params=params)
        except errors.NotFound:
            raise images.ImageError(
                "ImagePullUnauthorized", str(spec.image), f"the imagePullSecret {name!r} is gone"
            ) from None
        try:
            found.append(
                {str(k): base64.b64decode(v, validate=True) for k, v in (response.json().get("data") or {}).items()}
            )
        except (binascii.Error, ValueError):
            raise images.ImageError(
                "ImagePullUnauthorized", str(spec.image), f"the imagePullSecret {name!r} came back malformed"
            ) from None
    return images.credentials_from_secrets(found, registry)
