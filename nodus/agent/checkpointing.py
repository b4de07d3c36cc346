"""The checkpoints of one attempt: when to take them, how the program takes part, and how they commit.

The protocol, as the program sees it (``docs/checkpoints.md``). Its state lives under the policy's
``paths`` (default ``/nodus/state``; ``NODUS_CHECKPOINT_DIR`` is the first, ``NODUS_CHECKPOINT_PATHS`` all of
them, ``:``-separated). When the agent wants a checkpoint it writes ``/nodus/checkpoint/request``
(``NODUS_CHECKPOINT_REQUEST_FILE``), atomically, a JSON object ``{"seq": 7, "reason": "Interval",
"deadline": "<RFC 3339>"}``, and, if the program opted in by writing a signal name (``SIGUSR1`` or
``SIGUSR2``) to ``/nodus/checkpoint/signal``, sends that signal to the program's processes. The program
writes its state, then acknowledges by writing the seq to ``/nodus/checkpoint/ack``
(``NODUS_CHECKPOINT_ACK_FILE``), and leaves the paths alone until the request file is gone: the agent
copies what changed aside (fast, a local copy) and removes the request; hashing and uploading happen
afterwards while the program runs on.

A program that never acknowledges gets crash-consistent snapshots on the same cadence: the agent pauses
its processes (SIGSTOP), copies what changed, and resumes them (SIGCONT). The first request waits
:data:`FIRST_ACK_WAIT` for an ack; after one goes unanswered the agent stops waiting (an ack seen later
makes it wait again). ``integration: None`` never asks; ``HFTrainer`` is ``Auto`` plus a ``sitecustomize``
(``nodus/agent/hftrainer``) that makes a Hugging Face Trainer save to the paths, answer requests and resume.

Files (ADR 0031): ``/nodus/checkpoint`` is the program's writable directory, so the agent never opens a name
there by path. The request is written under a fresh random name (``O_CREAT | O_EXCL | O_NOFOLLOW``
through the directory's descriptor) and renamed over ``request``, which replaces whatever the program left
at that name (a link included) and never writes through it; the ack and signal files are read only if they
are regular files (a link, a fifo or a directory reads as absent), and the request is removed with
``unlinkat``. The checkpoint paths are walked from the host directory behind their mount, never through a
link (``nodus.agent.hostfiles``, ``snapshots``, ``restoring``).

Commit: the chunks go up first, the manifest last, and the checkpoint is committed when the Attempt's
``status.checkpoint`` names the manifest (an ended attempt's cannot change: see the Attempt strategy). An
upload cut short leaves no manifest and is never restored. ``maxSize`` is checked before anything is
copied. Unchanged files are neither copied nor hashed nor sent again (``nodus.agent.snapshots``).

Cadence (``interval``): an explicit duration, or ``auto``: Young and Daly's optimum
``sqrt(2 x C x M)``, with C the measured duration of the last checkpoint and M the offering's mean time
between interruptions (:data:`ON_DEMAND_MTBI` for capacity that is not interruptible), clamped to
1m..6h and shortened to a quarter of the time left before ``completeByTime`` as it nears (ADR 0046 §29).
``time_scale`` shrinks every duration for tests, as the simulated cloud shrinks boot times.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from nodus.agent import checkpointstore, hostfiles, snapshots
from nodus.agent.layout import AttemptLayout
from nodus.agent.runtime import Process
from nodus.apimachinery import units
from nodus.client import Client, errors

Object = dict[str, Any]
log = logging.getLogger("nodus.agent.checkpoints")

SANDBOX_CHECKPOINT_DIR = "/nodus/checkpoint"
REQUEST_FILE, ACK_FILE, SIGNAL_FILE = "request", "ack", "signal"
# The ack and signal files hold a number or a signal name: more is never read.
_CONTROL_FILE_BYTES = 4096
SIGNALS = {"SIGUSR1": signal.SIGUSR1, "SIGUSR2": signal.SIGUSR2}
MIN_INTERVAL, MAX_INTERVAL = timedelta(minutes=1), timedelta(hours=6)
ON_DEMAND_MTBI = timedelta(days=7)
# A gang rank keeps its last few shards in status.gang.shards: a gang checkpoint needs every rank's of one request.
GANG_SHARDS_KEPT = 4
# The checkpoint cost assumed before one has been measured.
FIRST_COST = timedelta(seconds=30)
FIRST_ACK_WAIT = timedelta(seconds=30)
ACK_WAIT = timedelta(minutes=10)
MAX_SIZE_DEFAULT = "1Ti"
STOP_TRIES = 3


class CheckpointError(Exception):
    """A checkpoint that did not commit; ``reason`` is a CamelCase code for the status."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Policy:
    """``spec.recovery.checkpoint`` of the attempt, resolved to host locations."""

    format: snapshots.Format
    integration: str
    interval: str
    max_size: int
    roots: dict[str, hostfiles.Location]

    @classmethod
    def of(cls, spec: Object, resolve: Callable[[str], hostfiles.Location | Path | None]) -> Policy | None:
        """The policy, or None when the attempt takes no checkpoints (continuity is not Checkpointed).

        ``resolve`` gives the host location of a sandbox path (a bare Path: its parent is trusted). Raises
        CheckpointError for a path that is not on a directory that outlives the program, or not normalised."""
        recovery = spec.get("recovery") or {}
        if not recovery or recovery.get("continuity", "Checkpointed") != "Checkpointed":
            return None
        policy = recovery.get("checkpoint") or {}
        roots: dict[str, hostfiles.Location] = {}
        for path in policy.get("paths") or ["/nodus/state"]:
            try:
                host = resolve(str(path))
            except hostfiles.UnsafePath as exc:
                raise CheckpointError("CheckpointPathInvalid", f"Checkpoint path {exc}.") from None
            if host is None:
                raise CheckpointError(
                    "CheckpointPathInvalid",
                    f"Checkpoint path {path} is not on a directory that outlives the program: use /nodus/state, "
                    "the working directory or a writable Volume.",
                )
            roots[str(path)] = hostfiles.location(host)
        return cls(
            format="Dcp" if policy.get("format") == "Dcp" else "Snapshot",
            integration=str(policy.get("integration") or "Auto"),
            interval=str(policy.get("interval") or "auto"),
            max_size=int(units.parse_quantity(str(policy.get("maxSize") or MAX_SIZE_DEFAULT))),
            roots=roots,
        )


def auto_interval(cost: timedelta, mtbi: timedelta, now: datetime, complete_by: datetime | None) -> timedelta:
    """Young-Daly: ``sqrt(2 x cost x mtbi)``, clamped to 1m..6h, and at most a quarter of the time left before
    ``complete_by`` (but not below 1m)."""
    optimum = timedelta(seconds=round(math.sqrt(2 * cost.total_seconds() * mtbi.total_seconds())))
    interval = min(max(optimum, MIN_INTERVAL), MAX_INTERVAL)
    if complete_by is not None:
        interval = min(interval, max(timedelta(seconds=round((complete_by - now).total_seconds() / 4)), MIN_INTERVAL))
    return interval


# Where a container runtime mounts the HFTrainer hook's directory (read-only): the host's path is not in the image.
CONTAINER_HOOK_DIR = "/opt/nodus/hftrainer"
HOST_HOOK_DIR = Path(__file__).parent / "hftrainer"


def environment(spec: Object, policy: Policy | None, *, hook_dir: str | None = None) -> dict[str, str]:
    """The protocol's environment variables for the program; ``hook_dir`` is where the program sees the HFTrainer
    hook (the host's directory by default, :data:`CONTAINER_HOOK_DIR` in a container)."""
    env: dict[str, str] = {}
    if spec.get("resumeCursor"):
        env["NODUS_RESUME_CURSOR"] = str(spec["resumeCursor"])
    if policy is None:
        return env
    env.update(
        NODUS_CHECKPOINT_DIR=next(iter(policy.roots)),
        NODUS_CHECKPOINT_PATHS=":".join(policy.roots),
        NODUS_CHECKPOINT_FORMAT=policy.format,
        NODUS_CHECKPOINT_REQUEST_FILE=f"{SANDBOX_CHECKPOINT_DIR}/{REQUEST_FILE}",
        NODUS_CHECKPOINT_ACK_FILE=f"{SANDBOX_CHECKPOINT_DIR}/{ACK_FILE}",
    )
    restore = spec.get("restore") or {}
    if restore.get("seq"):
        env["NODUS_RESTORED_SEQ"] = str(restore["seq"])
    if policy.integration == "HFTrainer":
        # A Trainer saves under output_dir and resumes from its newest checkpoint-N there; the sitecustomize in
        # nodus/agent/hftrainer points it there and answers requests (see its docstring).
        env.update(
            NODUS_HF_OUTPUT_DIR=next(iter(policy.roots)),
            HF_HUB_DISABLE_TELEMETRY="1",
            PYTHONPATH=hftrainer_pythonpath(spec, hook_dir or str(HOST_HOOK_DIR)),
        )
    return env


def hftrainer_pythonpath(spec: Object, hook_dir: str) -> str:
    """The hook's directory, then the ``PYTHONPATH`` the Job's own ``env`` sets (the last literal value, as the
    agent's environment takes it). The directory is the installed package's, visible in the bubblewrap sandbox
    through the read-only host root and mounted read-only into a container; its ``sitecustomize.py`` takes it off
    the program's ``sys.path`` again."""
    own = ""
    for item in spec.get("env") or []:
        if isinstance(item, dict) and item.get("name") == "PYTHONPATH" and isinstance(item.get("value"), str):
            own = item["value"]
    # An empty entry would put the working directory on the path.
    return os.pathsep.join(entry for entry in (hook_dir, own) if entry)


class Checkpointer:
    """Takes and commits the checkpoints of one attempt. One checkpoint at a time (a lock)."""

    def __init__(
        self,
        client: Client,
        attempt: Object,
        layout: AttemptLayout,
        policy: Policy,
        *,
        mtbi: timedelta | None,
        time_scale: float = 1.0,
    ) -> None:
        self._client = client
        self._attempt = attempt
        self._layout = layout
        self.policy = policy
        self._mtbi = mtbi or ON_DEMAND_MTBI
        self._scale = time_scale
        meta, spec = attempt["metadata"], attempt.get("spec") or {}
        self._name, self._namespace = str(meta["name"]), str(meta["namespace"])
        self._labels = {"job": str(spec.get("job")), "index": str(spec.get("index", 0)), "attempt": self._name}
        self._complete_by = units.time_or_none(spec.get("completeByTime"))
        restore = spec.get("restore") or {}
        # A gang rank (ADR 0046 §4: one shard per rank) lists its committed shards under the gang request each
        # answered; only rank 0 writes a torch.distributed.checkpoint's .metadata.
        self._rank: int | None = int(spec.get("rank") or 0) if spec.get("gang") else None
        self._shards: list[Object] = []
        self.seq = int(restore.get("seq") or 0)
        self.restored_from = int(restore["seq"]) if restore.get("seq") else None
        self.mirror = snapshots.Mirror(layout.mirror, policy.roots)
        self._control = hostfiles.Location(layout.checkpoint, (), SANDBOX_CHECKPOINT_DIR)
        self.store = checkpointstore.CheckpointStore(client, self._namespace)
        self.process: Process | None = None
        self._lock = asyncio.Lock()
        self._cost = FIRST_COST
        self._acked_ever = False
        self._unanswered = False
        self._status: Object = {}
        self._staged: snapshots.Staged | None = None
        # spec.checkpointRequest values already answered (or being answered).
        self.requests: set[str] = set()
        if self.restored_from is not None:
            self._status["restoredFromSeq"] = self.restored_from

    # --- restore ---------------------------------------------------------------------------------------------

    async def restore(self) -> None:
        """Restore ``spec.restore`` into the paths (before the program starts). Raises CheckpointError."""
        spec = self._attempt.get("spec") or {}
        restore = spec.get("restore") or {}
        if not restore.get("manifest"):
            return
        shards = (spec.get("gang") or {}).get("restoreShards") or []
        # Every rank's shard, this rank's last: a rank needs rank 0's .metadata beside its own files.
        own = [str(restore["manifest"])]
        digests = [str(s["manifest"]) for s in shards if str(s["manifest"]) not in own] + own
        try:
            await self.store.restore(digests, self.policy.roots, self.mirror)
        except checkpointstore.CheckpointFailed as exc:
            raise CheckpointError(
                "RestoreFailed", f"Checkpoint {restore.get('seq')} could not be restored: {exc}"
            ) from None

    # --- cadence ---------------------------------------------------------------------------------------------

    def interval(self, spec: Object | None = None) -> timedelta:
        """The cadence now: the policy's explicit duration, or Young-Daly's (see the module docstring)."""
        text = str((((spec or {}).get("recovery") or {}).get("checkpoint") or {}).get("interval") or "")
        text = text or self.policy.interval
        if text != "auto":
            return units.parse_duration(text)
        return auto_interval(self._cost, self._mtbi, units.now(), self._complete_by)

    async def run(self, current_spec: Callable[[], Object]) -> None:
        """Take a checkpoint every interval (re-read each time: the Job's interval may be edited) until cancelled."""
        last = time.monotonic()
        while True:
            interval = self.interval(current_spec())
            shown = units.format_duration(interval)
            if self._status.get("interval") != shown:
                self._status["interval"] = shown
                await self.report()
            wait = interval.total_seconds() * self._scale - (time.monotonic() - last)
            if wait > 0:
                await asyncio.sleep(min(wait, 5.0))  # then look again: the interval may have been edited
                continue
            await self.take("Interval")
            last = time.monotonic()

    # --- one checkpoint --------------------------------------------------------------------------------------

    async def take(self, reason: str, deadline: datetime | None = None, request: str | None = None) -> bool:
        """Take one checkpoint and commit it; False (and the failure reported) if it did not commit. With a
        ``deadline`` it is abandoned once that passes. ``request`` is the spec.checkpointRequest it answers."""
        async with self._lock:
            started = time.monotonic()
            seq = self.seq + 1
            try:
                work = self._take(seq, reason, deadline)
                if deadline is not None:
                    left = (deadline - units.now()).total_seconds()
                    if left <= 0:
                        raise CheckpointError("CheckpointTimedOut", "The deadline passed before the checkpoint began.")
                    try:
                        async with asyncio.timeout(left):
                            committed = await work
                    except TimeoutError:
                        raise CheckpointError(
                            "CheckpointTimedOut", f"The checkpoint did not finish before {units.format_time(deadline)}."
                        ) from None
                else:
                    committed = await work
            except CheckpointError as exc:
                log.warning("attempt %s: checkpoint %d failed: %s", self._name, seq, exc)
                await self._failed(exc, request)
                return False
            if committed is None:
                return True  # nothing to keep yet: the paths are empty and nothing was ever committed
            self._cost = timedelta(seconds=time.monotonic() - started)
            self.seq = seq
            self._status.update(committed, failures=0, lastFailure=None)
            if request is not None:
                self._status["handledRequest"] = request
                if self._rank is not None:
                    shard = {k: committed[k] for k in ("seq", "manifest", "size", "time")}
                    self._shards = [*self._shards, {"request": request, **shard}][-GANG_SHARDS_KEPT:]
            return await self._commit(seq)

    async def _take(self, seq: int, reason: str, deadline: datetime | None) -> Object | None:
        paused_at = time.monotonic()
        consistency = await self._stage(seq, reason, deadline)
        paused = time.monotonic() - paused_at
        staged = self._staged
        assert staged is not None
        if staged.files == 0 and self.seq == 0:
            return None
        if self.policy.format == "Dcp" and not self._rank:
            self._check_dcp()  # only rank 0's directory gets the .metadata
        manifest = await asyncio.to_thread(
            self.mirror.manifest, staged, seq, self.policy.format, units.format_time(units.now()), self._labels
        )
        try:
            uploaded = await self.store.upload(manifest, self.mirror)
        except checkpointstore.CheckpointFailed as exc:
            raise CheckpointError("CheckpointUploadFailed", str(exc)) from None
        return {
            "seq": seq,
            "manifest": uploaded.digest,
            "size": manifest.size,
            "time": units.format_time(units.now()),
            "consistency": consistency,
            "uploadedBytes": uploaded.chunk_bytes,
            "pauseSeconds": f"{paused:.3f}",
        }

    async def _stage(self, seq: int, reason: str, deadline: datetime | None) -> str:
        """Copy what changed aside, with the program's ack (Application) or paused (Crash)."""
        process = self.process
        if process is not None and self.policy.integration != "None" and await self._ask(seq, reason, deadline):
            try:
                await self._copy()
            finally:
                self._clear_request()
            return "Application"
        if process is not None:
            process.freeze()
        try:
            await self._copy()
        finally:
            if process is not None:
                process.thaw()
        return "Crash"

    async def _copy(self) -> None:
        try:
            self._staged = await asyncio.to_thread(self.mirror.stage, self.policy.max_size)
        except hostfiles.UnsafePath as exc:
            raise CheckpointError(
                "CheckpointPathUnsafe", f"{exc}: checkpoint paths are read without following symbolic links."
            ) from None
        except snapshots.TooLarge as exc:
            raise CheckpointError(
                "CheckpointTooLarge",
                f"The checkpoint paths hold {exc.size} bytes, more than recovery.checkpoint.maxSize "
                f"({exc.max_size} bytes); nothing was uploaded. Raise maxSize (at most 2Ti) or keep less state.",
            ) from None

    async def _ask(self, seq: int, reason: str, deadline: datetime | None) -> bool:
        """Write the request, signal an opted-in program and wait for its ack; True if it acknowledged."""
        if not self._acked_ever and self._ack_seq() is not None:
            self._acked_ever = True  # a late ack of an earlier request: the program takes part after all
        wait = (ACK_WAIT if self._acked_ever else FIRST_ACK_WAIT).total_seconds() * self._scale
        if self._unanswered and not self._acked_ever:
            wait = 0.0
        if deadline is not None:
            wait = min(wait, max((deadline - units.now()).total_seconds() / 2, 0.0))
        ack_by = units.now() + timedelta(seconds=wait)
        body = {"seq": seq, "reason": reason, "deadline": units.format_time(ack_by)}
        try:
            await asyncio.to_thread(hostfiles.write_file, self._control.child(REQUEST_FILE), orjson.dumps(body))
        except hostfiles.UnsafePath as exc:
            log.warning("attempt %s: no checkpoint request written: %s", self._name, exc)
            self._unanswered = True
            return False
        wanted = self._signal_number()
        if wanted is not None and self.process is not None:
            self.process.notify(wanted)
        until = time.monotonic() + wait
        while True:
            if self._acked(seq):
                self._acked_ever, self._unanswered = True, False
                return True
            if time.monotonic() >= until:
                self._unanswered = True
                return False
            await asyncio.sleep(0.1)

    def _acked(self, seq: int) -> bool:
        answered = self._ack_seq()
        return answered is not None and answered >= seq

    def _ack_seq(self) -> int | None:
        """The seq in the ack file (a number, or ``{"seq": n}``); None when there is none to read."""
        try:
            text = self._control_file(ACK_FILE).decode("utf-8").strip()
        except UnicodeDecodeError:
            return None
        with contextlib.suppress(ValueError, orjson.JSONDecodeError):
            value = orjson.loads(text)
            number = value.get("seq") if isinstance(value, dict) else value
            if isinstance(number, int) and not isinstance(number, bool):
                return number
        return None

    def _signal_number(self) -> int | None:
        try:
            name = self._control_file(SIGNAL_FILE).decode("utf-8").strip().upper()
        except UnicodeDecodeError:
            return None
        return SIGNALS.get(name if name.startswith("SIG") else f"SIG{name}")

    def _control_file(self, name: str) -> bytes:
        """What the program wrote in ``/nodus/checkpoint/<name>``, if it is a regular file (else nothing)."""
        try:
            return hostfiles.read_file(self._control.child(name), _CONTROL_FILE_BYTES) or b""
        except hostfiles.UnsafePath:
            return b""

    def _clear_request(self) -> None:
        with contextlib.suppress(hostfiles.UnsafePath):
            hostfiles.remove(self._control.child(REQUEST_FILE))

    def _check_dcp(self) -> None:
        """A torch.distributed.checkpoint directory is complete once its ``.metadata`` is written (last)."""
        for sandbox, location in self.policy.roots.items():
            if not _dcp_complete(location):
                raise CheckpointError(
                    "CheckpointIncomplete",
                    f"{sandbox} has no .metadata: format Dcp expects a complete torch.distributed.checkpoint "
                    "directory (dcp.save writes .metadata last).",
                )

    # --- reporting -------------------------------------------------------------------------------------------

    async def _failed(self, error: CheckpointError, request: str | None) -> None:
        self._status["failures"] = int(self._status.get("failures") or 0) + 1
        self._status["lastFailure"] = {"reason": error.reason, "message": str(error), "time": _now()}
        if request is not None:
            self._status["handledRequest"] = request
        await self.report()

    @property
    def stop_failures(self) -> int:
        """Failed tries of the current stop's checkpoint so far."""
        return int(self._status.get("stopFailures") or 0)

    def count_stop_failure(self) -> int:
        self._status["stopFailures"] = int(self._status.get("stopFailures") or 0) + 1
        return int(self._status["stopFailures"])

    def handled(self, request: str) -> bool:
        """Whether the checkpoint asked for by ``request`` was taken (committed or failed)."""
        return self._status.get("handledRequest") == request

    def reset_stop_failures(self) -> bool:
        """Forget the failures of an earlier stop; True if there were any (the status should say so)."""
        return self._status.pop("stopFailures", None) is not None

    @property
    def time_scale(self) -> float:
        return self._scale

    async def report(self) -> bool:
        """Write ``status.checkpoint`` as it stands; False if the API server refused it."""
        body: Object = {"status": {"checkpoint": _with_nulls(self._status)}}
        if self._shards:
            body["status"]["gang"] = {"shards": self._shards}
        for delay in (0.2, 0.5, 1, 2, 5, 5, 10):
            try:
                await self._client.patch("attempts", self._name, body, self._namespace, subresource="status")
                return True
            except (errors.NotFound, errors.Invalid) as exc:
                log.warning("attempt %s: checkpoint status refused: %s", self._name, exc)
                return False
            except Exception as exc:
                log.warning("attempt %s: reporting the checkpoint failed (%s); retrying", self._name, exc)
                await asyncio.sleep(delay)
        return False

    async def _commit(self, seq: int) -> bool:
        committed = await self.report()
        if committed:
            log.info("attempt %s: checkpoint %d committed (%s)", self._name, seq, self._status.get("manifest"))
        return committed


def _dcp_complete(location: hostfiles.Location) -> bool:
    """Whether the directory at ``location`` is empty, missing, or has a regular ``.metadata`` (links not followed)."""
    try:
        fd = hostfiles.open_directory(location)
    except (FileNotFoundError, hostfiles.UnsafePath):
        return True  # nothing to check here; the stage that follows says what is wrong with a link
    try:
        names = os.listdir(fd)
        if not names:
            return True
        with contextlib.suppress(FileNotFoundError):
            return stat.S_ISREG(os.stat(".metadata", dir_fd=fd, follow_symlinks=False).st_mode)
        return False
    finally:
        os.close(fd)


def _with_nulls(status: Object) -> Object:
    """Every key of the checkpoint status, None written as null so that a merge patch removes it."""
    keys = (
        "consistency",
        "failures",
        "handledRequest",
        "interval",
        "lastFailure",
        "manifest",
        "pauseSeconds",
        "restoredFromSeq",
        "seq",
        "size",
        "stopFailures",
        "time",
        "uploadedBytes",
    )
    return {key: status.get(key) for key in keys}


def _now() -> str:
    return units.format_time(units.now())
