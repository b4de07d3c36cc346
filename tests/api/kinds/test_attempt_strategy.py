"""The Attempt strategy's status rules: an ended attempt's checkpoint (and a gang rank's shards) is final."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api.kinds.attempt import AttemptStrategy

MANIFEST = "sha256:" + "c" * 64


def attempt(phase: str, checkpoint: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if checkpoint is not None:
        status["checkpoint"] = checkpoint
    spec = {"job": "train", "jobUID": "u", "index": 0, "number": 1}
    return {"metadata": {"name": "train-0-1", "namespace": "p"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("old_phase", "refused"),
    [pytest.param("Running", False, id="running-commits"), pytest.param("Lost", True, id="lost-cannot-commit")],
)
def test_a_checkpoint_commits_only_while_the_attempt_has_not_ended(old_phase: str, refused: bool) -> None:
    old = attempt(old_phase, {"seq": 1, "manifest": "sha256:" + "d" * 64})
    new = attempt(old_phase, {"seq": 2, "manifest": MANIFEST})
    errors = AttemptStrategy().validate_status_update(new, old)
    assert bool(errors) == refused
    if refused:
        assert errors[0].field == "status.checkpoint.manifest"
        assert "has ended (Lost)" in errors[0].detail


def test_other_status_writes_to_an_ended_attempt_pass() -> None:
    old = attempt("Lost", {"seq": 1, "manifest": MANIFEST})
    new = attempt("Lost", {"seq": 1, "manifest": MANIFEST})
    new["status"]["cost"] = {"totalUSD": "1.00"}
    assert AttemptStrategy().validate_status_update(new, old) == []


def test_an_ended_gang_rank_cannot_list_a_new_shard() -> None:
    shard = {"request": "2026-11-29T12:00:00Z", "seq": 1, "manifest": MANIFEST}
    old = attempt("Lost", {"seq": 1, "manifest": MANIFEST})
    old["status"]["gang"] = {"shards": [shard]}
    new = attempt("Lost", {"seq": 1, "manifest": MANIFEST})
    new["status"]["gang"] = {"shards": [shard, {**shard, "request": "2026-11-29T12:05:00Z", "seq": 2}]}
    errors = AttemptStrategy().validate_status_update(new, old)
    assert errors and "can no longer be committed" in errors[0].detail
