"""``integration: HFTrainer``: a Hugging Face Trainer that knows nothing of Nodus, checkpointed and resumed.

The program is a real (tiny: a 2-layer GPT-2 with hidden size 32, random tokens, CPU, no download) Trainer run as a
subprocess with the environment the agent gives it (``checkpointing.environment``); the test plays the agent: it
writes the request, waits for the ack, copies the paths aside, stops the program and restores the copy for the next
run, as a replacement attempt would see it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nodus.agent import checkpointing
from nodus.agent.hftrainer import sitecustomize

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

HOOK = Path(checkpointing.__file__).parent / "hftrainer"
STEPS = 40
# argv: max_steps, pause after each step (s), output_dir ("-": the Trainer's default).
TRAIN = r"""
import sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

steps, pause, output_dir = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=16))


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, index):
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


class Steps(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        print("step", state.global_step, flush=True)
        time.sleep(pause)


args = TrainingArguments(
    output_dir=None if output_dir == "-" else output_dir, max_steps=steps, per_device_train_batch_size=4,
    save_strategy="no", report_to=[], logging_strategy="no", use_cpu=True, disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=[Steps()])
print("output_dir", trainer.args.output_dir, flush=True)
print("callbacks", " ".join(type(callback).__name__ for callback in trainer.callback_handler.callbacks), flush=True)
trainer.train()
print("done", trainer.state.global_step, flush=True)
"""


class Program:
    """The training program as a subprocess, its stdout and stderr in files."""

    def __init__(self, directory: Path, env: dict[str, str], *argv: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        script = directory / "train.py"
        script.write_text(TRAIN)
        self.stdout, self.stderr = directory / "stdout", directory / "stderr"
        base = {"PATH": os.environ["PATH"], "HOME": str(directory), "LANG": "C.UTF-8", "HF_HUB_OFFLINE": "1"}
        with self.stdout.open("wb") as out, self.stderr.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, str(script), *argv],
                env={**base, **env},
                cwd=directory,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )

    def lines(self) -> list[str]:
        return self.stdout.read_text().splitlines()

    def steps(self) -> list[int]:
        return [int(line.split()[1]) for line in self.lines() if line.startswith("step ")]

    def said(self, key: str) -> str:
        return next(line.split(" ", 1)[1] for line in self.lines() if line.startswith(f"{key} "))

    def wait_for(self, what: str, done: Any, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if self.process.poll() is not None:
                pytest.fail(f"the program ended ({self.process.returncode}) before {what}:\n{self.output()}")
            if time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"no {what} within {timeout} s:\n{self.output()}")
            time.sleep(0.05)

    def finish(self, timeout: float = 240) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            pytest.fail(f"the program did not finish within {timeout} s:\n{self.output()}")
        assert self.process.returncode == 0, self.output()

    def output(self) -> str:
        return f"stdout:\n{self.stdout.read_text()}\nstderr:\n{self.stderr.read_text()}"


def job_spec(state: Path, **spec: Any) -> dict[str, Any]:
    return {"recovery": {"checkpoint": {"integration": "HFTrainer", "paths": [str(state)]}}, **spec}


def agent_environment(spec: dict[str, Any], checkpoint: Path) -> dict[str, str]:
    """What the agent gives the program, with the request and ack files (in /nodus/checkpoint) under ``checkpoint``."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    env = checkpointing.environment(spec, checkpointing.Policy.of(spec, Path))
    return {
        **env,
        "NODUS_CHECKPOINT_REQUEST_FILE": str(checkpoint / checkpointing.REQUEST_FILE),
        "NODUS_CHECKPOINT_ACK_FILE": str(checkpoint / checkpointing.ACK_FILE),
    }


def request(checkpoint: Path, seq: int) -> None:
    deadline = (datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    temporary = checkpoint / ".request.tmp"
    temporary.write_text(json.dumps({"seq": seq, "reason": "Preemption", "deadline": deadline}))
    os.replace(temporary, checkpoint / checkpointing.REQUEST_FILE)


def acked(checkpoint: Path) -> str:
    ack = checkpoint / checkpointing.ACK_FILE
    return ack.read_text().strip() if ack.exists() else ""


def test_a_trainer_saves_on_request_and_its_replacement_resumes_there(tmp_path: Path) -> None:
    state, first, copied = tmp_path / "state", tmp_path / "attempt-1", tmp_path / "copied"
    spec = job_spec(state)
    program = Program(first / "program", agent_environment(spec, first / "checkpoint"), str(STEPS), "0.25", "-")
    program.wait_for("step 3", lambda: len(program.steps()) >= 3)
    request(first / "checkpoint", 7)
    program.wait_for("the ack", lambda: acked(first / "checkpoint") == "7")
    # The agent copies the paths aside, removes the request, and (a preemption) stops the program.
    shutil.copytree(state, copied, symlinks=True)
    (first / "checkpoint" / checkpointing.REQUEST_FILE).unlink()
    program.process.kill()
    program.process.wait()

    assert program.said("output_dir") == str(state)
    assert "output_dir 'trainer_output' -> " in program.stderr.read_text()
    assert not (first / "program" / "trainer_output").exists()  # changed before the Trainer made it
    saved = sorted(copied.glob("checkpoint-*"))
    assert len(saved) == 1, saved
    step = int(saved[0].name.removeprefix("checkpoint-"))
    assert 3 <= step < STEPS
    assert json.loads((saved[0] / "trainer_state.json").read_text())["global_step"] == step

    # The replacement: the agent restored the copy before the program started.
    shutil.rmtree(state)
    shutil.copytree(copied, state, symlinks=True)
    second = tmp_path / "attempt-2"
    env = agent_environment({**spec, "restore": {"seq": 7}}, second / "checkpoint")
    replacement = Program(second / "program", env, str(STEPS), "0", "-")
    replacement.finish()

    assert f"Trainer resumes from {state / saved[0].name}" in replacement.stderr.read_text()
    assert replacement.steps()[0] == step + 1
    assert replacement.said("done") == str(STEPS)


@pytest.mark.parametrize(
    ("nodus", "output_dir", "expected"),
    [
        pytest.param(False, "out", "out", id="inert-outside-nodus"),
        pytest.param(True, "state/run", "state/run", id="own-output-dir-under-the-paths-kept"),
    ],
)
def test_what_the_hook_leaves_alone(tmp_path: Path, nodus: bool, output_dir: str, expected: str) -> None:
    state = tmp_path / "state"
    env = agent_environment(job_spec(state), tmp_path / "checkpoint") if nodus else {"PYTHONPATH": str(HOOK)}
    program = Program(tmp_path / "program", env, "2", "0", str(tmp_path / output_dir))
    program.finish()

    assert program.said("output_dir") == str(tmp_path / expected)
    assert ("NodusCheckpointCallback" in program.said("callbacks").split()) is nodus
    said = program.stderr.read_text()
    assert "output_dir" not in said
    assert ("nodus:" in said) is nodus  # save_total_limit None -> 2


CHAINED = """
import sys
print("other sitecustomize ran", flush=True)
"""
PROBE = r"""
import sys, sitecustomize
hook = sys.argv[1]
print("sitecustomize", sitecustomize.__file__)
print("hook on sys.path", any(entry.rstrip("/") == hook for entry in sys.path))
print("finder", any(type(finder).__name__ == "TrainerFinder" for finder in sys.meta_path))
try:
    import transformers.trainer
except ImportError as error:
    print("import failed", error.name)
"""


@pytest.mark.parametrize("nodus", [pytest.param(True, id="in-nodus"), pytest.param(False, id="outside-nodus")])
def test_the_hook_chains_to_the_sitecustomize_it_shadows(tmp_path: Path, nodus: bool) -> None:
    other, fake = tmp_path / "other", tmp_path / "fake"
    other.mkdir()
    (other / "sitecustomize.py").write_text(CHAINED)
    # A transformers without a trainer: importing it fails as it would without the hook.
    (fake / "transformers").mkdir(parents=True)
    (fake / "transformers" / "__init__.py").write_text("")
    spec = job_spec(tmp_path / "state", env=[{"name": "PYTHONPATH", "value": f"{other}:{fake}"}])
    env = agent_environment(spec, tmp_path / "checkpoint") if nodus else {"PYTHONPATH": f"{HOOK}:{other}:{fake}"}
    assert env["PYTHONPATH"] == f"{HOOK}:{other}:{fake}"
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(HOOK)],
        env={"PATH": os.environ["PATH"], **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert result.stdout.splitlines() == [
        "other sitecustomize ran",
        f"sitecustomize {other / 'sitecustomize.py'}",
        "hook on sys.path False",
        f"finder {nodus}",
        "import failed transformers.trainer",
    ]
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param([], str(HOOK), id="no-pythonpath"),
        pytest.param([{"name": "PYTHONPATH", "value": "/app/src"}], f"{HOOK}:/app/src", id="job-pythonpath-kept"),
        pytest.param([{"name": "PYTHONPATH", "value": ""}], str(HOOK), id="empty-adds-no-working-directory"),
        pytest.param(
            [{"name": "PYTHONPATH", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
            str(HOOK),
            id="secret-not-read",
        ),
    ],
)
def test_pythonpath(env: list[dict[str, Any]], expected: str) -> None:
    spec = job_spec(Path("/nodus/state"), env=env)
    assert checkpointing.environment(spec, checkpointing.Policy.of(spec, Path))["PYTHONPATH"] == expected


def test_the_newest_complete_checkpoint_is_resumed(tmp_path: Path) -> None:
    for name, complete in [("checkpoint-9", True), ("checkpoint-10", True), ("checkpoint-12", False), ("other", True)]:
        (tmp_path / name).mkdir()
        if complete:
            (tmp_path / name / "trainer_state.json").write_text("{}")

    # checkpoint-12 was cut short (a crash-consistent snapshot in the middle of a save): no trainer_state.json.
    assert sitecustomize.newest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-10")
    assert sitecustomize.newest_checkpoint(str(tmp_path / "missing")) is None
