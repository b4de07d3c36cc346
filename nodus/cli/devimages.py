"""The development images: a Debian base with Python, and the same with PyTorch's CPU build, built once and cached.

``nodus dev`` and the tests need images that work without Docker Hub and without the internet:

* the base image, a root filesystem built from Debian's own mirror (``mmdebstrap --variant=minbase``) holding
  ``python3`` and ``python`` (Debian's ``python-is-python3``), as a tarball ``podman import`` turns into
  ``localhost/nodus/base:<tag>``. The tag is a hash of the recipe (:func:`tag`), so a change of recipe builds a new
  tarball and an unchanged one is never built twice;
* the PyTorch image ``localhost/nodus/pytorch:<tag>``: the base plus the torch CPU wheel pinned in the test extra of
  ``pyproject.toml`` and its dependencies, unpacked by the host's pip into ``/usr/local/lib/python3.11/dist-packages``
  (the base has no pip; the host's venv is the same CPython 3.11 as Debian bookworm's). Its tag hashes the base tag
  and the torch version (:func:`pytorch_tag`). The wheels come from the machine's own wheels first (``pip download
  --no-index``), else pip's configured indexes, else PyTorch's CPU index. The built image is exported with ``podman
  save`` to ``<cache>/pytorch-<tag>.tar``, so a fresh podman store gets it back with ``podman load`` in seconds.

Every artifact lives under a cache directory the caller gives (``<data dir>/images`` for ``nodus dev``,
``.cache/images`` for the tests). Builds are serialised by a lock file (two test processes, or ``nodus dev`` and a
test, may ask at once) and written to a temporary name renamed into place, so a build cut short leaves nothing a
later call would take for an image. Every function blocks and raises :class:`ImageBuildError` with the failing
tool's last lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

SUITE = "bookworm"
PACKAGES = ("python3", "python-is-python3", "ca-certificates")
"""What the base image holds beyond Debian's minbase: the examples and the tests' programs are shell and
Python (run as ``python`` or ``python3``); ca-certificates for HTTPS from inside."""
BUILD_TIMEOUT = 1800
PODMAN = ("podman", "--cgroup-manager=cgroupfs")
# Without CAP_SYS_RESOURCE podman's default ulimits cannot be applied: every container gets these explicit ones.
ULIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096")
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
IMAGE_PYTHON = (3, 11)
"""Debian bookworm's CPython, which the host's pip must run on to pick wheels the image can import."""
IMAGE_SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
BASE_REPOSITORY = "localhost/nodus/base"
PYTORCH_REPOSITORY = "localhost/nodus/pytorch"
# torchrun for images without pip's entry-point scripts (the host's would name the host venv's python).
_TORCHRUN = "#!/usr/bin/python3\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n"


class ImageBuildError(Exception):
    """An image could not be built; the message says why (the builder's last lines)."""


def recipe(packages: Sequence[str] = PACKAGES) -> dict[str, object]:
    """What the base tarball is built from; :func:`tag` hashes it."""
    return {"builder": "mmdebstrap", "suite": SUITE, "variant": "minbase", "include": sorted(packages)}


def tag(packages: Sequence[str] = PACKAGES) -> str:
    """The base image's tag, a function of the recipe whatever the packages' order (``bookworm-1a2b3c4d5e6f``)."""
    digest = hashlib.sha256(json.dumps(recipe(packages), sort_keys=True).encode()).hexdigest()[:12]
    return f"{SUITE}-{digest}"


def base_tarball(cache: Path) -> Path:
    """The root filesystem tarball of the base image under ``cache``, built first if missing (about 20 s with a
    reachable Debian mirror)."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"base-{tag()}.tar"
    if target.exists():
        return target
    with _locked(cache / ".build.lock"):
        if target.exists():  # built by whoever held the lock before us
            return target
        if shutil.which("mmdebstrap") is None:
            raise ImageBuildError("mmdebstrap is not installed (make installs it: .ci/install-system-packages)")
        partial = cache / f".base-{tag()}.tar.partial"
        partial.unlink(missing_ok=True)
        command = ["mmdebstrap", "--variant=minbase", "--format=tar", f"--include={','.join(PACKAGES)}", SUITE]
        try:
            _run([*command, str(partial)], "mmdebstrap")
        except ImageBuildError:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, target)
    return target


def import_into_podman(tarball: Path, reference: str, podman: str = "podman") -> str:
    """``podman import`` the tarball as ``reference`` (``localhost/nodus/base:<tag>``) unless it is there
    already; returns the reference. The image runs ``/bin/sh`` when nothing else is given."""
    if subprocess.run([podman, "image", "exists", reference], check=False).returncode == 0:
        return reference
    change = [
        "--change",
        'CMD ["/bin/sh"]',
        "--change",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ]
    _run([podman, "import", *change, str(tarball), reference], "podman import")
    return reference


def base_image(cache: Path) -> str:
    """``localhost/nodus/base:<tag>`` in podman's local store, built and imported first if missing. The tag is the
    recipe's hash, so an image podman already holds under it is this recipe's: nothing is built again, whatever
    ``cache`` holds (a new ``nodus dev`` data directory on a machine that built it once starts at once)."""
    reference = f"{BASE_REPOSITORY}:{tag()}"
    if _exists(reference):
        return reference
    return import_into_podman(base_tarball(cache), reference)


def torch_version(pyproject: Path = PYPROJECT) -> str:
    """The torch version pinned (``"torch==X"``) in ``pyproject.toml``'s test extra."""
    try:
        match = re.search(r'"torch==([^"\s;]+)"', pyproject.read_text())
    except OSError as exc:
        raise ImageBuildError(f"cannot read the torch pin from {pyproject}: {exc}") from None
    if match is None:
        raise ImageBuildError(f'{pyproject} pins no torch version ("torch==X")')
    return match.group(1)


def companions(pyproject: Path = PYPROJECT) -> list[str]:
    """What the PyTorch image holds beside torch: transformers and accelerate as pyproject.toml's test extra pins
    them (a Hugging Face Trainer runs in the image, as ``integration: HFTrainer`` expects)."""
    text = pyproject.read_text(encoding="utf-8")
    return [match.group(1) for match in re.finditer(r'"((?:transformers|accelerate)[<>=!~][^"]*)"', text)]


def pytorch_tag(version: str | None = None) -> str:
    """The PyTorch image's tag: the torch version and a hash of it with the base tag and the companions
    (``2.13.0-1a2b3c4d5e6f``)."""
    version = version or torch_version()
    recipe = {"base": tag(), "torch": version, "companions": companions()}
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]
    return f"{version}-{digest}"


def pytorch_reference(version: str | None = None) -> str:
    """``localhost/nodus/pytorch:<pytorch_tag>``, whether built or not."""
    return f"{PYTORCH_REPOSITORY}:{pytorch_tag(version)}"


def pytorch_available(cache: Path) -> bool:
    """Whether the PyTorch image is in podman's store or saved under ``cache`` (so using it builds nothing)."""
    reference = pytorch_reference()
    return _exists(reference) or (cache / f"pytorch-{pytorch_tag()}.tar").exists()


def pytorch_image(cache: Path) -> str:
    """``localhost/nodus/pytorch:<tag>`` in podman's local store: present already, loaded from the cache's saved
    archive, or built (a minute or more: about 700 MB are unpacked) and saved there first."""
    reference = pytorch_reference()
    archive = cache / f"pytorch-{pytorch_tag()}.tar"
    if _exists(reference):
        return reference
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / ".pytorch.lock"):
        if not archive.exists():
            _build_pytorch(cache, reference, archive)
        elif not _exists(reference):
            _run([*PODMAN, "load", "--quiet", "--input", str(archive)], "podman load")
    if not _exists(reference):
        raise ImageBuildError(f"{archive} does not hold {reference}: remove it to build the image again")
    return reference


def _build_pytorch(cache: Path, reference: str, archive: Path) -> None:
    if sys.version_info[:2] != IMAGE_PYTHON:
        raise ImageBuildError(
            f"the PyTorch image's wheels are chosen by this interpreter's pip, which must be CPython "
            f"{'.'.join(map(str, IMAGE_PYTHON))} like the image's (this is {sys.version.split()[0]})"
        )
    base = base_image(cache)
    version = torch_version()
    with tempfile.TemporaryDirectory(prefix="nodus-pytorch-", dir=cache) as scratch:
        context = Path(scratch)
        wheels = context / "wheels"
        _download_wheels(f"torch=={version}", wheels)
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        if companions():
            # The torch wheel fetched above satisfies their dependency on torch (never PyPI's CUDA build).
            download = ["download", "--only-binary=:all:", "--find-links", str(wheels), "--dest", str(wheels)]
            _run([*pip, *download, f"torch=={version}", *companions()], "pip download (transformers, accelerate)")
        site = context / "site"
        # --no-index with the downloaded wheels only: what is unpacked is exactly what was fetched above.
        install = ["install", "--no-index", "--find-links", str(wheels), "--target", str(site), "--no-compile"]
        _run([*pip, *install, f"torch=={version}", *companions()], "pip install --target")
        shutil.rmtree(site / "bin", ignore_errors=True)
        (context / "torchrun").write_text(_TORCHRUN)
        (context / "Containerfile").write_text(
            f"FROM {base}\n"
            f"COPY site {IMAGE_SITE_PACKAGES}\n"
            "COPY --chmod=755 torchrun /usr/local/bin/torchrun\n"
            'CMD ["/bin/sh"]\n'
        )
        shutil.rmtree(wheels)
        _run([*PODMAN, "build", "--quiet", "--pull=never", "--tag", reference, str(context)], "podman build")
    check = "import torch; print(torch.__version__, float(torch.ones(2).sum()))"
    printed = _run(
        [*PODMAN, "run", "--rm", "--runtime", "runc", "--network", "none", *ULIMITS, reference, "python", "-c", check],
        "the PyTorch image's check",
    )
    if not printed.startswith(version) or not printed.rstrip().endswith("2.0"):
        raise ImageBuildError(f"{reference} imports a torch that says {printed.strip()!r}, not {version}")
    partial = cache / f".{archive.name}.partial"
    partial.unlink(missing_ok=True)
    try:
        _run([*PODMAN, "save", "--quiet", "--output", str(partial), reference], "podman save")
    except ImageBuildError:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, archive)


def _download_wheels(requirement: str, into: Path) -> None:
    """The requirement's wheels and its dependencies' into ``into``: from the machine's own wheels (pip's
    find-links) when they are all there, else pip's configured indexes, else those and PyTorch's CPU index."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--only-binary=:all:"]
    attempts: tuple[list[str], ...] = (["--no-index"], [], ["--extra-index-url", TORCH_INDEX])
    errors: list[str] = []
    for extra in attempts:
        try:
            _run([*pip, *extra, "--dest", str(into), requirement], "pip download")
            return
        except ImageBuildError as exc:
            errors.append(str(exc))
    raise ImageBuildError(f"cannot download {requirement} and its dependencies: {errors[-1]}")


def _exists(reference: str) -> bool:
    return subprocess.run([*PODMAN, "image", "exists", reference], check=False).returncode == 0


def _run(command: list[str], what: str) -> str:
    """Run ``command``; its stdout, or :class:`ImageBuildError` naming ``what`` with the last lines it printed."""
    try:
        done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    except subprocess.CalledProcessError as exc:
        tail = "\n".join(((exc.stderr or "") + (exc.stdout or "")).strip().splitlines()[-5:])
        raise ImageBuildError(f"{what} failed ({exc.returncode}): {tail}") from None
    except subprocess.TimeoutExpired:
        raise ImageBuildError(f"{what} did not finish in {BUILD_TIMEOUT} s") from None
    return done.stdout


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
