"""This host's GPUs, and how an attempt's container gets exactly the ones assigned to it.

Three parts, each a contract the container runtime relies on:

- :func:`discover` lists the host's GPUs (:class:`Gpu`: host index, UUID, model, memory) through NVML when the
  ``nvidia-ml-py`` package is importable, else through ``nvidia-smi``. A host without GPUs, without the driver or
  whose driver does not answer has none: ``[]``, logged at INFO with the reason, never an exception.
- :class:`CdiDevices` knows the Container Device Interface names of those GPUs. The container engine (podman 4.3,
  whose CDI library accepts ``cdiVersion`` up to 0.5.0 and reads only ``/etc/cdi`` and ``/var/run/cdi``, with no
  option to point it elsewhere) injects a device given as ``--device <vendor>/<class>=<name>``: its device nodes,
  the device-cgroup rule that lets them be opened, its mounts (driver libraries, ``nvidia-smi``) and its env.
  :meth:`CdiDevices.names_for` maps host indexes to those names and refuses an index no spec declares, so an
  attempt never starts on a GPU it was not given or without one it was.
- :func:`visible_devices_env` is the environment that makes the program inside agree with what was injected.

Spec files are the host administrator's (root-owned directories), yet are parsed defensively: a file that is not a
mapping of the CDI shape, or names devices outside CDI's name syntax, is refused with the file and the fault named
(:class:`CdiError`), since its names end up in the engine's argument vector; so is a spec whose ``cdiVersion`` is
newer than the engine reads, since the engine would silently ignore it and every attempt naming its devices fail.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

logger = logging.getLogger(__name__)

# The kind NVIDIA's container toolkit declares its GPUs under.
NVIDIA_KIND = "nvidia.com/gpu"
# Where podman 4.3 reads specs, lowest priority first (a later directory wins a name both declare).
SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
# The newest cdiVersion podman 4.3.1's CDI library resolves (measured: a 0.6.0 spec's devices are "unresolvable").
ENGINE_CDI_VERSION = (0, 5, 0)
# The dynamic spec directory: where the agent writes a generated spec.
GENERATED_SPEC = Path("/var/run/cdi/nvidia.yaml")
# A spec larger than this is not one (nvidia-ctk's for eight GPUs is tens of KiB); refusing it bounds the parse.
_MAX_SPEC_BYTES = 4 * 1024 * 1024
# nvidia-smi can hang on a wedged driver; beyond this the host is treated as having no usable GPUs.
_NVIDIA_SMI_TIMEOUT_S = 30.0
_NVIDIA_CTK_TIMEOUT_S = 120.0

# CDI's name syntax (the spec's "kind" and device "name"); anything else is refused before it reaches argv.
_VENDOR = r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_CLASS = r"[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?"
_KIND = re.compile(rf"{_VENDOR}/{_CLASS}")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}")
_SPEC_SUFFIXES = (".json", ".yaml", ".yml")


class CdiError(Exception):
    """A CDI spec is unusable, or an assigned GPU has no CDI device. The message names the file or the index."""


@dataclass(frozen=True)
class Gpu:
    """One GPU as the host's driver numbers it (``index`` is nvidia-smi's, in PCI bus order)."""

    index: int
    uuid: str
    name: str
    memory_mib: int


def discover(nvidia_smi: str | None = shutil.which("nvidia-smi"), *, nvml: bool = True) -> list[Gpu]:
    """This host's GPUs, by index; ``[]`` when there are none or the driver cannot be reached (never raises for that).

    NVML is asked first when ``nvml`` and the ``pynvml`` module (package ``nvidia-ml-py``) is importable; when it is
    absent or fails, ``nvidia_smi`` (a path, ``None`` for none; by default the one on PATH when this module was
    imported) is run. Each reason for finding nothing is logged at INFO; a malformed line of nvidia-smi's output is
    skipped with a warning.
    """
    if nvml:
        found = _discover_nvml()
        if found is not None:
            return found
    if nvidia_smi is None:
        logger.info("no GPUs: neither NVML (nvidia-ml-py) nor nvidia-smi is available on this host")
        return []
    return _discover_nvidia_smi(nvidia_smi)


def _discover_nvml() -> list[Gpu] | None:
    """The GPUs NVML reports, or ``None`` when NVML is not importable or cannot start (then nvidia-smi is tried)."""
    try:
        import pynvml  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        logger.info("NVML cannot start (%s); trying nvidia-smi", error)
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                Gpu(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // (1024 * 1024),
                )
            )
        return gpus
    except pynvml.NVMLError as error:
        logger.info("NVML failed listing GPUs (%s); trying nvidia-smi", error)
        return None
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    # Older nvidia-ml-py releases return bytes where newer ones return str.
    return value.decode() if isinstance(value, bytes) else value


def _discover_nvidia_smi(nvidia_smi: str) -> list[Gpu]:
    command = [nvidia_smi, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        logger.info("no GPUs: %s could not be run (%s)", nvidia_smi, error)
        return []
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        logger.info("no GPUs: %s exited %d: %s", nvidia_smi, done.returncode, said[0] if said else "(no output)")
        return []
    gpus = []
    for line in done.stdout.splitlines():
        if line.strip():
            gpu = _parse_csv_line(line)
            if gpu is None:
                logger.warning("nvidia-smi printed a line that is not a GPU, skipped: %r", line[:200])
            else:
                gpus.append(gpu)
    if not gpus:
        logger.info("no GPUs: %s lists none", nvidia_smi)
    return gpus


def _parse_csv_line(line: str) -> Gpu | None:
    """One ``index, uuid, name, memory`` line; the model name may itself hold commas, so it is what lies between."""
    fields = [field.strip() for field in line.split(",")]
    if len(fields) < 4:
        return None
    index, uuid, memory = fields[0], fields[1], fields[-1]
    name = ", ".join(fields[2:-1])
    if not index.isdecimal() or not memory.isdecimal() or not uuid or not name:
        return None
    return Gpu(index=int(index), uuid=uuid, name=name, memory_mib=int(memory))


@dataclass(frozen=True)
class CdiDevices:
    """The CDI kind and device names this host's GPUs are injected by.

    ``devices`` are the names the specs declare under ``kind``; ``uuids`` maps host index to UUID for specs that name
    devices by UUID (nvidia-ctk's ``--device-name-strategy=uuid``). ``sources`` are the spec files read.
    """

    kind: str
    devices: frozenset[str]
    uuids: tuple[tuple[int, str], ...] = ()
    sources: tuple[Path, ...] = ()

    @classmethod
    def from_spec_file(cls, path: Path, gpus: Sequence[Gpu] = ()) -> CdiDevices:
        """The devices one spec file declares, under its own kind. Raises :class:`CdiError` naming the fault."""
        kind, names = _read_spec(path)
        return cls(kind, frozenset(names), _uuids(gpus), (path,))

    @classmethod
    def for_host(
        cls,
        gpus: Sequence[Gpu],
        *,
        spec_dirs: Iterable[Path] = SPEC_DIRS,
        kind: str = NVIDIA_KIND,
        nvidia_ctk: str | None = None,
        generated: Path = GENERATED_SPEC,
    ) -> CdiDevices:
        """The CDI devices of ``gpus``: from the specs in ``spec_dirs`` declaring ``kind``, else generated once.

        With no GPUs there are no devices and nothing is read. Otherwise every ``.json``/``.yaml``/``.yml`` spec in
        ``spec_dirs`` declaring ``kind`` contributes its names (an unreadable or malformed file is skipped with a
        warning, as the engine skips it). If none does, ``nvidia-ctk cdi generate --output=<generated>`` is run
        (``nvidia_ctk`` defaults to the one on PATH) and its spec read. Raises :class:`CdiError` when the host has GPUs
        but no spec can be found or generated: such a host cannot give a container its GPUs.
        """
        if not gpus:
            return cls(kind, frozenset())
        names: set[str] = set()
        sources: list[Path] = []
        for path in _spec_files(spec_dirs):
            try:
                spec_kind, spec_names = _read_spec(path)
            except CdiError as error:
                logger.warning("CDI spec skipped: %s", error)
                continue
            if spec_kind == kind:
                names.update(spec_names)
                sources.append(path)
        if sources:
            found = cls(kind, frozenset(names), _uuids(gpus), tuple(sources))
            found._warn_uncovered(gpus)
            return found
        ctk = nvidia_ctk if nvidia_ctk is not None else shutil.which("nvidia-ctk")
        if ctk is None:
            raise CdiError(
                f"this host has {len(gpus)} GPU(s) but no CDI spec in {', '.join(map(str, spec_dirs))} declares "
                f"{kind} devices and nvidia-ctk is not on PATH: install the NVIDIA container toolkit"
            )
        _generate(ctk, generated)
        spec_kind, spec_names = _read_spec(generated)
        if spec_kind != kind:
            raise CdiError(f"{generated}: nvidia-ctk generated kind {spec_kind!r}, not {kind!r}")
        generated_devices = cls(kind, frozenset(spec_names), _uuids(gpus), (generated,))
        generated_devices._warn_uncovered(gpus)
        return generated_devices

    def _warn_uncovered(self, gpus: Sequence[Gpu]) -> None:
        for gpu in gpus:
            try:
                self.names_for([gpu.index])
            except CdiError as error:
                logger.warning("%s: attempts assigned it cannot start", error)

    def names_for(self, indexes: Sequence[int]) -> list[str]:
        """The fully-qualified CDI names (``<kind>=<name>``) of the GPUs at these host indexes, in the given order.

        A GPU is found by the name ``<index>`` (nvidia-ctk's default), ``gpu<index>`` (its ``type-index``
        strategy) or its UUID. Raises :class:`CdiError` for an index no spec declares, or one given twice.
        """
        if len(set(indexes)) != len(indexes):
            raise CdiError(f"GPU indexes {list(indexes)} name a GPU more than once")
        uuids = dict(self.uuids)
        names = []
        for index in indexes:
            if index < 0:
                raise CdiError(f"GPU index {index} is negative")
            candidates = [str(index), f"gpu{index}"] + ([uuids[index]] if index in uuids else [])
            found = next((name for name in candidates if name in self.devices), None)
            if found is None:
                declared = ", ".join(sorted(self.devices)) or "none"
                raise CdiError(
                    f"GPU {index} has no CDI device of kind {self.kind} (declared: {declared}; "
                    f"specs: {', '.join(map(str, self.sources)) or 'none'})"
                )
            names.append(f"{self.kind}={found}")
        return names


def _uuids(gpus: Sequence[Gpu]) -> tuple[tuple[int, str], ...]:
    return tuple((gpu.index, gpu.uuid) for gpu in gpus)


def _spec_files(spec_dirs: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for directory in spec_dirs:
        try:
            entries = sorted(directory.iterdir())
        except FileNotFoundError:
            continue
        except OSError as error:
            logger.warning("CDI spec directory %s unreadable: %s", directory, error)
            continue
        files.extend(entry for entry in entries if entry.suffix in _SPEC_SUFFIXES and entry.is_file())
    return files


def _read_spec(path: Path) -> tuple[str, list[str]]:
    """A spec file's kind and device names, checked against CDI's shape and name syntax."""
    try:
        with path.open("rb") as file:
            raw = file.read(_MAX_SPEC_BYTES + 1)
    except OSError as error:
        raise CdiError(f"{path}: cannot be read: {error.strerror or error}") from error
    if len(raw) > _MAX_SPEC_BYTES:
        raise CdiError(f"{path}: larger than {_MAX_SPEC_BYTES} bytes, not a CDI spec")
    try:
        text = raw.decode()
        # JSON is parsed as JSON (YAML 1.1 reads a few JSON documents differently); anything else as YAML.
        spec: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CdiError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {first}") from error
    if not isinstance(spec, dict):
        raise CdiError(
            f"{path}: a CDI spec is a mapping with cdiVersion, kind and devices; this is {type(spec).__name__}"
        )
    version = spec.get("cdiVersion")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise CdiError(f"{path}: cdiVersion {version!r} is missing or not <major>.<minor>.<patch>")
    if tuple(int(part) for part in version.split(".")) > ENGINE_CDI_VERSION:
        # The engine would skip the whole file and then fail every attempt naming its devices; say so up front.
        newest = ".".join(map(str, ENGINE_CDI_VERSION))
        raise CdiError(f"{path}: cdiVersion {version} is newer than {newest}, the newest podman 4.3 reads")
    kind = spec.get("kind")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        raise CdiError(f"{path}: kind {kind!r} is not <vendor>/<class> in CDI's name syntax")
    devices = spec.get("devices")
    if not isinstance(devices, list):
        raise CdiError(f"{path}: devices is missing or not a list")
    names = []
    for position, device in enumerate(devices):
        name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(name, str) or not _DEVICE_NAME.fullmatch(name):
            raise CdiError(f"{path}: device {position} has no valid name ({name!r})")
        names.append(name)
    return kind, names


def _generate(nvidia_ctk: str, output: Path) -> None:
    command = [nvidia_ctk, "cdi", "generate", f"--output={output}"]
    logger.info("no CDI spec declares this host's GPUs; generating one: %s", " ".join(command))
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(command, capture_output=True, text=True, timeout=_NVIDIA_CTK_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CdiError(f"{' '.join(command)} could not be run: {error}") from error
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()[-2000:]
        raise CdiError(f"{' '.join(command)} exited {done.returncode}: {said or '(no output)'}")


def visible_devices_env(indexes: Sequence[int]) -> dict[str, str]:
    """The GPU environment of a container given the GPUs at these host indexes through CDI.

    - ``NVIDIA_VISIBLE_DEVICES`` is the host indexes, as NVIDIA's container toolkit sets it: tools that read it see the
      host's numbering, and a legacy toolkit hook, if the host has one, injects the same GPUs CDI did rather than the
      ``all`` that CUDA base images declare. With no GPUs it is ``void``, which that hook reads as "inject nothing".
    - ``CUDA_VISIBLE_DEVICES`` is ``0..n-1``, not the host indexes: the container holds only the assigned device
      nodes, so the driver numbers its GPUs from 0, and host index 3 would name a GPU that does not exist there
      (CUDA would then see none). Setting it rather than leaving it unset overrides any value the image declares.
      With no GPUs it is empty, which hides every GPU from CUDA.
    - ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: the host indexes are in PCI bus order, and CUDA's own default order is
      fastest-first, so this makes container ordinal ``i`` the ``i``-th assigned GPU in host order.

    Raises ``ValueError`` for a negative index or one given twice.
    """
    if any(index < 0 for index in indexes) or len(set(indexes)) != len(indexes):
        raise ValueError(f"GPU indexes must be distinct and non-negative: {list(indexes)}")
    if not indexes:
        return {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": ""}
    return {
        "NVIDIA_VISIBLE_DEVICES": ",".join(str(index) for index in sorted(indexes)),
        "CUDA_VISIBLE_DEVICES": ",".join(str(ordinal) for ordinal in range(len(indexes))),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
