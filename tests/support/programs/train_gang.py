"""A small, deterministic data-parallel PyTorch (CPU, gloo) training program for gang tests.

    python train_gang.py STEPS SECONDS_PER_STEP          # under torchrun (Nodus launcher: Torchrun)

Every rank trains the same linear model; each step every rank computes the gradient of its own batch
(seeded by the step and the rank), the gradients are all-reduced and averaged, and SGD steps. The result
depends only on the steps taken, never on when the gang was stopped and restarted.

Checkpoints use ``torch.distributed.checkpoint`` into ``$NODUS_CHECKPOINT_DIR`` (every rank writes its shard,
rank 0 the ``.metadata``). Between steps every rank looks for its own agent's request file, the ranks agree
(an all-reduce of "someone was asked") and save together; each rank then acknowledges its own request (waiting
for it if its agent has not written it yet: every rank is asked) and waits until its agent has copied the shard
aside (the request file is gone). At start, a restored
checkpoint (``.metadata`` present) is loaded.

At the end every rank writes the final weights to ``/nodus/outputs/weights.json`` (``float.hex`` of every
parameter value, in order) and prints ``weights <json>``. Without ``NODUS_CHECKPOINT_DIR`` (the local
reference run) it checkpoints nothing and writes the weights to ``$WEIGHTS_OUT`` if set.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)


def pending_request(answered: int) -> int:
    """The seq of this rank's agent's request not yet answered, else 0."""
    path = os.environ.get("NODUS_CHECKPOINT_REQUEST_FILE")
    if not path or not os.path.exists(path):
        return 0
    try:
        seq = int(json.loads(Path(path).read_text())["seq"])
    except (OSError, ValueError, KeyError):
        return 0
    return seq if seq > answered else 0


def own_request(answered: int, wait: float = 60.0) -> int:
    """This rank's request, waiting for it: a gang checkpoint is requested of every rank at once, but the requests
    reach the ranks' agents a moment apart, and each rank must answer its own with the save the ranks just made
    together (a later save would be another step's)."""
    deadline = time.monotonic() + wait
    while not (seq := pending_request(answered)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return seq


def acknowledge(seq: int) -> None:
    Path(os.environ["NODUS_CHECKPOINT_ACK_FILE"]).write_text(str(seq))
    request = Path(os.environ["NODUS_CHECKPOINT_REQUEST_FILE"])
    deadline = time.monotonic() + 120
    while request.exists() and time.monotonic() < deadline:
        time.sleep(0.02)  # the agent copies the shard aside, then removes the request


def main() -> None:
    steps, pause = int(sys.argv[1]), float(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    probe = torch.tensor([float(rank + 1)])
    dist.all_reduce(probe)
    print(f"rank {rank} of {world}: all-reduce {probe.item()}", flush=True)
    assert probe.item() == world * (world + 1) / 2

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    directory = os.environ.get("NODUS_CHECKPOINT_DIR")
    step = 0
    if directory and os.path.exists(os.path.join(directory, ".metadata")):
        state = {"model": model.state_dict(), "step": torch.tensor(0)}
        dcp.load(state, checkpoint_id=directory)
        model.load_state_dict(state["model"])
        step = int(state["step"])
        print(f"restored step {step} (seq {os.environ.get('NODUS_RESTORED_SEQ', '-')})", flush=True)

    answered = 0
    while step < steps:
        generator = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(16, 8, generator=generator)
        y = x.sum(dim=1, keepdim=True) * 0.5 + 1.0
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        for parameter in model.parameters():
            assert parameter.grad is not None
            dist.all_reduce(parameter.grad)
            parameter.grad /= world
        optimizer.step()
        step += 1
        print(f"step {step} loss {loss.item():.6f}", flush=True)
        time.sleep(pause)
        if directory:
            seq = pending_request(answered)
            asked = torch.tensor([1 if seq else 0])
            dist.all_reduce(asked, op=dist.ReduceOp.MAX)
            if asked.item():
                dcp.save({"model": model.state_dict(), "step": torch.tensor(step)}, checkpoint_id=directory)
                dist.barrier()
                seq = seq or own_request(answered)
                if seq:
                    acknowledge(seq)
                    answered = seq
                print(f"checkpoint at step {step} (seq {seq or '-'})", flush=True)
                dist.barrier()

    weights = [float(v).hex() for p in model.parameters() for v in p.detach().flatten().tolist()]
    print("weights " + json.dumps(weights), flush=True)
    out = Path("/nodus/outputs/weights.json") if directory else Path(os.environ.get("WEIGHTS_OUT", os.devnull))
    out.write_text(json.dumps(weights))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
