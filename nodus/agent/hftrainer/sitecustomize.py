"""A Hugging Face ``Trainer`` in a Nodus Job, checkpointed and resumed without knowing about Nodus.

With ``spec.recovery.checkpoint.integration: HFTrainer`` the agent puts this file's directory first on the program's
``PYTHONPATH``, and Python's ``site`` imports it as ``sitecustomize`` when any Python of the program starts. It then
imports the ``sitecustomize`` it shadows, if there is one further down ``sys.path``, takes its own directory off
``sys.path`` again, and, when ``NODUS_HF_OUTPUT_DIR`` is set, puts a finder first on ``sys.meta_path`` that patches
``transformers.trainer.Trainer`` once the program imports it:

- ``output_dir`` becomes ``$NODUS_HF_OUTPUT_DIR`` (the first checkpoint path) unless it already lies under one of
  ``$NODUS_CHECKPOINT_PATHS``, and ``save_total_limit`` becomes 2 when unset, so the checkpointed state is the
  Trainer's two newest ``checkpoint-N`` directories. What changed is said on stderr.
- A callback answers the protocol (``docs/checkpoints.md``): a request with a seq not yet answered, seen at the end
  of an optimizer step, makes the Trainer save ``checkpoint-N`` at that step; once it is written the seq goes to the
  ack file. The agent copies the paths aside and then removes the request; a later save first waits for that (at
  most :data:`SETTLE_LIMIT`; not at all if the ack came after the request's deadline, when the agent has moved on),
  so the Trainer never rewrites or rotates checkpoints under a copy in progress.
- ``train()`` without ``resume_from_checkpoint`` (and outside a hyperparameter search) resumes from the newest
  complete ``checkpoint-N`` under ``output_dir``: the one the agent restored before the program started. Complete
  means it has ``trainer_state.json``, which the Trainer writes after the weights, optimizer and RNG state, so a
  crash-consistent snapshot taken in the middle of a save is passed over. The program's own argument wins.

Several processes (torchrun): rank 0 reads the request and broadcasts its seq every step, so every rank saves at
the same step; after a barrier rank 0 acknowledges. One node only: gangs have no protocol yet.

It runs in the program's interpreter, which may have neither nodus nor transformers: standard library only (and
little of it at start-up, which every Python in the sandbox pays), syntax that Python 3.8 reads, and never nodus.
Without ``NODUS_HF_OUTPUT_DIR`` nothing is installed; without transformers the finder is never asked for it; a patch
that fails is reported on stderr and leaves the Trainer as it was.
"""

from __future__ import annotations

import os
import sys

# Spelled out rather than imported from typing: a program pays for every import made here.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader as _LoaderBase
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any
else:
    _LoaderBase = object

TARGET = "transformers.trainer"
KEEP_CHECKPOINTS = 2
# How long a save waits for the agent to finish copying the previous one (it removes the request when done).
SETTLE_LIMIT = 600.0
# The request's deadline has whole seconds (cut, not rounded).
DEADLINE_SLACK = 1.0
STATE_FILE = "trainer_state.json"


def log(message: str) -> None:
    print(f"nodus: {message}", file=sys.stderr, flush=True)


# --- start-up ----------------------------------------------------------------------------------------------------


def start() -> None:
    """What ``site`` runs: the hook (first, so that it is in place whatever the other sitecustomize imports), then
    the shadowed sitecustomize, whose errors surface as they would have without this one."""
    install()
    chain()


def chain() -> None:
    """Import the next ``sitecustomize`` on ``sys.path``, and leave this directory off ``sys.path`` for good: the
    program sees the path and the ``sitecustomize`` module it would have had (its subprocesses still inherit
    ``PYTHONPATH``, and so this hook). The hook lives on in ``sys.meta_path``."""
    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:] = [entry for entry in sys.path if os.path.realpath(entry or os.curdir) != here]
    ours = sys.modules.pop("sitecustomize", None)
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ImportError as error:
        if error.name != "sitecustomize":
            raise
    finally:
        if ours is not None and "sitecustomize" not in sys.modules:
            sys.modules["sitecustomize"] = ours


def install() -> None:
    """Patch the Trainer now if transformers is already imported, else when it is; nothing outside Nodus."""
    if not os.environ.get("NODUS_HF_OUTPUT_DIR"):
        return
    module = sys.modules.get(TARGET)
    if module is not None:
        patch(module)
    elif not any(isinstance(finder, TrainerFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, TrainerFinder())


class TrainerFinder:
    """Finds nothing itself: asks the finders after it for ``transformers.trainer`` and wraps the loader."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != TARGET:
            return None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec: ModuleSpec | None = find(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = PatchingLoader(spec.loader)
            return spec
        return None


class PatchingLoader(_LoaderBase):
    """The real loader, then :func:`patch`; afterwards the module names its real loader again."""

    def __init__(self, loader: _LoaderBase) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        # One module to patch: later imports need not pass through here.
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, TrainerFinder)]
        patch(module)


# --- the patch ---------------------------------------------------------------------------------------------------


def patch(module: ModuleType) -> None:
    """Wrap ``Trainer.__init__`` and ``Trainer.train`` (subclasses inherit both); once, and never fatally."""
    trainer = getattr(module, "Trainer", None)
    if trainer is None or getattr(trainer, "_nodus_patched", False):
        return
    try:
        _patch(trainer)
    except Exception as error:
        log(f"could not prepare the Trainer for Nodus checkpoints ({error!r}); it runs unchanged")


def _patch(trainer: Any) -> None:
    import functools
    import importlib

    base = importlib.import_module("transformers.trainer_callback").TrainerCallback
    callback_class = type("NodusCheckpointCallback", (CheckpointCallback, base), {})
    protocol = Protocol.from_environment()
    init, train = trainer.__init__, trainer.train

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        given = kwargs.get("args", args[1] if len(args) > 1 else None)
        if given is not None:
            adopt(given)  # before the Trainer creates its output_dir
        init(self, *args, **kwargs)
        adopt(self.args)  # the Trainer made its own TrainingArguments
        if protocol is not None:
            self.add_callback(callback_class(protocol))

    @functools.wraps(train)
    def train_(self: Any, *args: Any, **kwargs: Any) -> Any:
        resume = args[0] if args else kwargs.get("resume_from_checkpoint")
        trial = args[1] if len(args) > 1 else kwargs.get("trial")
        if resume is None and trial is None and "model_path" not in kwargs:
            newest = newest_checkpoint(str(self.args.output_dir))
            if newest is not None:
                log(f"Trainer resumes from {newest}")
                if args:
                    args = (newest, *args[1:])
                else:
                    kwargs["resume_from_checkpoint"] = newest
        return train(self, *args, **kwargs)

    trainer.__init__, trainer.train = __init__, train_
    trainer._nodus_patched = True


def checkpoint_paths() -> list[str]:
    return [path for path in os.environ.get("NODUS_CHECKPOINT_PATHS", "").split(":") if path]


def under(path: str, roots: list[str]) -> bool:
    """Whether ``path`` (relative: to the working directory) is one of ``roots`` or inside one."""
    path = os.path.abspath(path)
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in map(os.path.abspath, roots))


def adopt(args: Any) -> None:
    """Point ``TrainingArguments`` at the checkpoint paths; idempotent, and says on stderr what it changed."""
    target = os.environ.get("NODUS_HF_OUTPUT_DIR")
    if not target:
        return
    changes = []
    current = args.output_dir
    if current is None or not under(os.fspath(current), checkpoint_paths() or [target]):
        args.output_dir = target
        changes.append(f"output_dir {current!r} -> {target!r}")
    if getattr(args, "save_total_limit", 0) is None:
        args.save_total_limit = KEEP_CHECKPOINTS
        changes.append(f"save_total_limit None -> {KEEP_CHECKPOINTS}")
    if changes:
        log(f"Trainer {', '.join(changes)}: Nodus checkpoints what the Trainer saves there")


def newest_checkpoint(output_dir: str) -> str | None:
    """The complete ``checkpoint-N`` with the highest N under ``output_dir``, if any."""
    import re

    try:
        names = os.listdir(output_dir)
    except OSError:
        return None
    best: tuple[int, str] | None = None
    for name in names:
        match = re.fullmatch(r"checkpoint-(\d+)", name)
        path = os.path.join(output_dir, name)
        if match and os.path.isfile(os.path.join(path, STATE_FILE)) and (best is None or int(match[1]) > best[0]):
            best = (int(match[1]), path)
    return None if best is None else best[1]


# --- the protocol ------------------------------------------------------------------------------------------------


class Protocol:
    """The program's side of one attempt's checkpoint protocol, shared by every Trainer of the process."""

    def __init__(self, request_file: str, ack_file: str) -> None:
        self.request_file, self.ack_file = request_file, ack_file
        # A process started again within the same attempt does not answer again what was answered.
        self.answered = _number(_read(ack_file)) or 0
        self.pending: int | None = None
        self.pending_deadline: float | None = None
        # The seq acknowledged whose request the agent has not removed yet, and until when to wait for that.
        self.unsettled: tuple[int, float] | None = None

    @classmethod
    def from_environment(cls) -> Protocol | None:
        request, ack = os.environ.get("NODUS_CHECKPOINT_REQUEST_FILE"), os.environ.get("NODUS_CHECKPOINT_ACK_FILE")
        return cls(request, ack) if request and ack else None

    def request(self) -> tuple[int, float | None] | None:
        """The request file's seq and deadline (seconds since the epoch), if it holds a request."""
        import json

        text = _read(self.request_file)
        if text is None:
            return None
        try:
            body = json.loads(text)
        except ValueError:
            return None
        seq = body.get("seq") if isinstance(body, dict) else None
        if not isinstance(seq, int) or isinstance(seq, bool):
            return None
        return seq, _epoch_seconds(body.get("deadline"))

    def step_end(self, args: Any, state: Any, control: Any) -> None:
        """At the end of an optimizer step: ask for a save if a new request came; wait if a save will follow."""
        seen = self.request() if state.is_world_process_zero else None
        seq = _broadcast(seen[0] if seen else 0, args)
        if seq > self.answered and seq != self.pending:
            self.pending = seq
            self.pending_deadline = seen[1] if seen else None
        if self.pending is not None:
            # Set again every step until the save happened: save_strategy "best" may have cleared it.
            control.should_save = True
        if control.should_save or control.should_evaluate:
            self.settle()

    def saved(self, args: Any, state: Any) -> None:
        """After the Trainer wrote ``checkpoint-N``: acknowledge the request it answers."""
        if self.pending is None:
            return
        seq, deadline = self.pending, self.pending_deadline
        self.pending, self.pending_deadline, self.answered = None, None, seq
        _barrier(args)  # every rank's share of the checkpoint is on disk
        import time

        late = deadline is not None and time.time() > deadline + DEADLINE_SLACK
        self.unsettled = None if late else (seq, time.monotonic() + SETTLE_LIMIT)
        if not state.is_world_process_zero:
            return
        temporary = os.path.join(os.path.dirname(self.ack_file), ".ack.tmp")
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(str(seq))
        os.replace(temporary, self.ack_file)
        log(f"checkpoint request {seq} answered with checkpoint-{state.global_step}" + (" (late)" if late else ""))

    def settle(self) -> None:
        """Wait until the agent removed the request last acknowledged, i.e. finished copying the paths."""
        if self.unsettled is None:
            return
        import time

        seq, until = self.unsettled
        while (current := self.request()) is not None and current[0] == seq:
            if time.monotonic() >= until:
                log(f"checkpoint request {seq} still there after {SETTLE_LIMIT:.0f} s; saving anyway")
                break
            time.sleep(0.05)
        self.unsettled = None


class CheckpointCallback:
    """Mixed into ``transformers.TrainerCallback`` when transformers is imported (see :func:`_patch`)."""

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.protocol.step_end(args, state, control)

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:
            self.protocol.settle()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.protocol.saved(args, state)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.protocol.settle()  # the program may save its model under output_dir next


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _epoch_seconds(text: object) -> float | None:
    from datetime import datetime

    if not isinstance(text, str):
        return None
    try:
        # Python before 3.11 does not read the "Z".
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _distributed(args: Any) -> Any:
    """``torch.distributed`` when this process is one of several, else None."""
    if getattr(args, "world_size", 1) <= 1:
        return None
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def _broadcast(seq: int, args: Any) -> int:
    """Rank 0's seq on every rank, so that all save at the same step."""
    dist = _distributed(args)
    if dist is None:
        return seq
    torch = sys.modules["torch"]
    value = torch.tensor([seq], dtype=torch.long, device=args.device)
    dist.broadcast(value, src=0)
    return int(value.item())


def _barrier(args: Any) -> None:
    dist = _distributed(args)
    if dist is not None:
        dist.barrier()


if __name__ == "sitecustomize":
    start()
