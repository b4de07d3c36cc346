"""A small, deterministic PyTorch (CPU) training program that takes part in Nodus's checkpoint protocol.

    python train_torch.py STEPS SECONDS_PER_STEP [--no-ack]

It trains a two-layer network with SGD and momentum for STEPS steps; the batch of step ``s`` is drawn from
a generator seeded with ``s``, so the result depends only on the steps taken, never on when the program was
stopped and resumed. State lives in ``$NODUS_CHECKPOINT_DIR/train.pt`` (``torch.save``: the model, the
optimizer, the next step), written to a temporary file and renamed. At start it resumes from that file if
the agent restored one. Between steps it looks for the agent's request file and, when a new request is
there, saves and acknowledges (``--no-ack`` leaves the agent to take crash-consistent snapshots).

Each step reports progress (``completed`` = steps done), and prints ``step N`` lines; at the end it writes
the final weights to ``/nodus/outputs/weights.pt`` and prints ``weights sha256:<hex>`` of the raw bytes of
every parameter, in order (bit-identical runs print the same digest). ``--local DIR`` runs it outside Nodus
with DIR as the state directory and no protocol, for the uninterrupted reference run.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(64, 16, generator=generator)
    return x, (x[:, :4].sum(dim=1, keepdim=True) * 0.5).sin()


def digest(model: torch.nn.Module) -> str:
    hasher = hashlib.sha256()
    for parameter in model.parameters():
        bits = parameter.detach().contiguous().view(torch.int32).flatten().tolist()
        hasher.update(b"".join(v.to_bytes(4, "little", signed=True) for v in bits))
    return "sha256:" + hasher.hexdigest()


def save(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    temporary = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, temporary)
    os.replace(temporary, path)


def main() -> None:
    steps, seconds = int(sys.argv[1]), float(sys.argv[2])
    local = sys.argv[sys.argv.index("--local") + 1] if "--local" in sys.argv else None
    ack = "--no-ack" not in sys.argv and local is None
    state = Path(local or os.environ.get("NODUS_CHECKPOINT_DIR", "/nodus/state"))
    state.mkdir(parents=True, exist_ok=True)
    checkpoint = state / "train.pt"
    request = Path(os.environ.get("NODUS_CHECKPOINT_REQUEST_FILE", "/nodus/checkpoint/request"))
    acknowledge = Path(os.environ.get("NODUS_CHECKPOINT_ACK_FILE", "/nodus/checkpoint/ack"))
    progress = Path(os.environ.get("NODUS_PROGRESS_FILE", "/dev/null")) if local is None else Path(os.devnull)

    model, optimizer = model_and_optimizer()
    start = 0
    if checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        start = int(saved["step"])
    print(f"start {start} restored {os.environ.get('NODUS_RESTORED_SEQ', '-')}", flush=True)
    answered = 0
    for step in range(start, steps):
        x, y = batch(step)
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if local is None:
            if not ack:  # crash-consistent snapshots need the state on disk after every step
                save(checkpoint, model, optimizer, step + 1)
            with progress.open("a") as out:
                out.write(json.dumps({"completed": step + 1, "total": steps, "metrics": {"loss": loss.item()}}) + "\n")
        print(f"step {step + 1}", flush=True)
        if ack and request.exists():
            try:
                asked = int(json.loads(request.read_text())["seq"])
            except (OSError, ValueError, KeyError):
                asked = 0
            if asked > answered:
                save(checkpoint, model, optimizer, step + 1)
                acknowledge.write_text(str(asked))
                answered = asked
        time.sleep(seconds)
    if local is not None:
        save(checkpoint, model, optimizer, steps)
    else:
        outputs = Path("/nodus/outputs")
        if outputs.is_dir():
            torch.save(model.state_dict(), outputs / "weights.pt")
    print(f"weights {digest(model)}", flush=True)


if __name__ == "__main__":
    main()
