"""``integration: HFTrainer`` through a real cluster: a Hugging Face Trainer that knows nothing of Nodus is
preempted with notice, saves ``checkpoint-N`` when asked, and its replacement resumes from it and finishes."""

from __future__ import annotations

import re

import pytest

from tests.agent.test_hftrainer import TRAIN
from tests.e2e.running.conftest import Running
from tests.e2e.running.test_jobs import create
from tests.e2e.running.test_recovery import attempt_log, by_number, nodus
from tests.support.images import registry_pytorch_image

pytestmark = pytest.mark.e2e

STEPS = 150


@pytest.mark.slow  # a real Trainer in the PyTorch image (about 1 GB pushed once), about 45 s (slow tier)
def test_a_preempted_trainer_resumes_from_the_checkpoint_it_saved_in_the_notice(running: Running) -> None:
    # torch and transformers are in the PyTorch image; the agent mounts its hook into the container (ADR 0040).
    project = running.project()
    create(
        running,
        project,
        "hf",
        # The program's file is on the host, which the container does not see: pass it inline.
        image=registry_pytorch_image(),
        command=["python3", "-c", TRAIN, str(STEPS), "0.05", "-"],
        resources={"cpu": "1"},
        env=[{"name": "HF_HUB_OFFLINE", "value": "1"}],
        # No interval checkpoint before the notice: the Trainer answers the notice's request.
        recovery={"checkpoint": {"interval": "6h", "integration": "HFTrainer"}, "minProgressDuration": "1s"},
    )
    running.wait_for("the Trainer to train", lambda: "step 10\n" in attempt_log(running, project, "hf", 1), 120)
    node = by_number(running, project, "hf")[0]["spec"]["node"]
    nodus(running, "sim", "preempt", node, "--notice", "6s")

    done = running.wait_phase(project, "hf", "Succeeded", "Failed", timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    lost, replacement = by_number(running, project, "hf")
    assert lost["status"]["reason"] == "Preempted"
    final = lost["status"]["checkpoint"]
    assert final["consistency"] == "Application", final
    assert replacement["spec"]["restore"]["seq"] == final["seq"]

    first, second = attempt_log(running, project, "hf", 1), attempt_log(running, project, "hf", 2)
    answered = re.search(rf"^nodus: checkpoint request {final['seq']} answered with checkpoint-(\d+)$", first, re.M)
    assert answered is not None, first[-3000:]
    step = int(answered.group(1))
    assert f"nodus: Trainer resumes from /nodus/state/checkpoint-{step}" in second, second[-3000:]
    steps = [int(s) for s in re.findall(r"^step (\d+)$", second, re.M)]
    assert steps[0] == step + 1 and steps[-1] == STEPS
    assert f"done {STEPS}" in second
