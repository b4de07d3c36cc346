"""``nodus run`` and ``nodus attach`` as a person uses them: the real CLI, as a subprocess, against the running
cluster with a project member's kubeconfig. Ctrl-C is a real SIGINT to a CLI whose stdout is a terminal (a pty).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nodus.apimachinery.money import amount_cell
from tests.e2e.running.conftest import Running
from tests.e2e.running.test_faults import nodus as as_admin
from tests.e2e.running.test_recovery import COUNTER, committed
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e


def nodus(running: Running, project: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """``nodus ARGS`` as alice (the project's Owner), stdin not a terminal, stdout a pipe (plain output)."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE")}
    env["KUBECONFIG"] = str(running.cluster.kubeconfig("alice", project))
    return subprocess.run(
        [sys.executable, "-m", "nodus.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def jobs(running: Running, project: str) -> list[dict[str, Any]]:
    with running.client() as client:
        response = client.get(f"{API}/namespaces/{project}/jobs")
        assert response.status_code == 200, response.text
        return list(response.json()["items"])


def cancel(running: Running, project: str, name: str) -> None:
    with running.client() as client:
        response = client.patch(
            f"{API}/namespaces/{project}/jobs/{name}",
            json={"spec": {"state": "Cancelled"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        assert response.status_code == 200, response.text


def created_name(stdout: str) -> str:
    line = next(line for line in stdout.splitlines() if line.startswith("job/") and line.endswith(" created"))
    return line.removeprefix("job/").removesuffix(" created")


def test_run_shows_the_estimate_the_output_and_the_cost(running: Running) -> None:
    project = running.project()
    image = registry_python_image()
    done = nodus(running, project, "run", "--yes", "--image", image, "--", "python", "-c", "print(42)")
    out = done.stdout
    assert done.returncode == 0, f"{out}\n{done.stderr}\n{running.logs()}"
    assert "Cost USD" in out and "Rate USD/h" in out, "the estimate table comes first"
    assert "\x1b" not in out + done.stderr, "stdout is a pipe: plain lines, no colour, no bar"
    name = created_name(out)
    assert name.startswith("python-"), name
    assert "42" in out.splitlines(), out
    assert f"job/{name} Succeeded" in out
    assert "cost: " in out
    # the order a person reads: estimate, created, the program's output, the outcome
    assert out.index("Cost USD") < out.index(f"job/{name} created") < out.index("\n42\n") < out.rindex("Succeeded")
    stored = running.job(project, name)
    assert stored["spec"]["image"] == image and stored["spec"]["command"] == ["python", "-c", "print(42)"]
    assert stored["status"]["phase"] == "Succeeded"
    cost_line = next(line for line in out.splitlines() if line.startswith("cost: "))
    total = stored["status"]["cost"]["totalUSD"]
    assert stored["status"]["cost"]["final"] and "so far" not in cost_line, "the summary waits for the final charge"
    assert cost_line.startswith(f"cost: {amount_cell(total)} USD"), (cost_line, total)


TRAINING = """import json, os, time
for step in range(1, 11):
    with open(os.environ["NODUS_PROGRESS_FILE"], "a") as progress:
        progress.write(json.dumps({"completed": step, "total": 10, "metrics": {"loss": 1 / step}}) + "\\n")
    print("step", step, flush=True)
    time.sleep(0.2)
"""


def test_progress_and_metrics_are_followed(running: Running) -> None:
    project = running.project()
    done = nodus(running, project, "run", "--yes", "--image", registry_python_image(), "--", "python", "-c", TRAINING)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    progress = [line for line in lines if line.startswith("progress ")]
    assert progress and progress[-1].startswith("progress 10/10 (100%)"), done.stdout
    assert "loss=0.1" in progress[-1]
    assert "step 10" in lines


def test_a_failing_command_exits_1_with_the_reason(running: Running) -> None:
    project = running.project()
    manifest = running.directory / f"fail-{project}.yaml"
    manifest.write_text("kind: Job\nspec:\n  backoffLimit: 0\n")
    done = nodus(
        running,
        project,
        "run",
        "-f",
        str(manifest),
        "--yes",
        "--image",
        registry_python_image(),
        "--name",
        "boom",
        "--",
        "python",
        "-c",
        "import sys; print('about to fail', flush=True); sys.exit(3)",
    )
    assert done.returncode == 1, f"{done.stdout}\n{done.stderr}"
    assert "about to fail" in done.stdout
    stored = running.job(project, "boom")
    assert stored["status"]["phase"] == "Failed"
    reason = stored["status"]["reason"]
    assert "job/boom Failed in" in done.stdout and reason in done.stdout, done.stdout
    assert "attempt boom-0-1 failed with exit code 3" in done.stdout


def test_source_is_uploaded_without_what_gitignore_names(running: Running, tmp_path: Path) -> None:
    project = running.project()
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "main.py").write_text("print('main ran')\n")
    (source / "pkg" / "util.py").write_text("")
    (source / "secret.env").write_text("TOKEN=hunter2\n")
    (source / ".gitignore").write_text("*.env\n")
    (source / ".git").mkdir()
    (source / ".git" / "config").write_text("")
    (source / "pkg" / "entry.py").symlink_to("../main.py")  # a link that stays inside: unpacked as a link
    listing = (
        "import os; print(sorted(os.listdir('.'))); print(sorted(os.listdir('pkg'))); "
        "print('link', os.readlink('pkg/entry.py')); exec(open('pkg/entry.py').read())"
    )
    done = nodus(
        running, project, "run", "--yes", "--image", registry_python_image(), "--source", str(source),
        "--", "python", "-c", listing,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "main ran" in done.stdout
    listed = next(line for line in done.stdout.splitlines() if line.startswith("[") and "main.py" in line)
    assert "secret.env" not in listed and ".git'" not in listed, listed
    assert "'.gitignore'" in listed and "'pkg'" in listed
    assert "link ../main.py" in done.stdout.splitlines()
    assert "1 ignored by .gitignore" in done.stderr
    stored = running.job(project, created_name(done.stdout))
    digest = stored["spec"]["source"]["blob"]
    assert digest.startswith("sha256:") and digest in done.stderr

    # A link out of the tree would make the agent refuse the archive: refused here, before anything is sent.
    (source / "passwd").symlink_to("/etc/passwd")
    refused = nodus(
        running, project, "run", "--yes", "--image", registry_python_image(), "--source", str(source),
        "--", "true",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "links that leave it (passwd -> /etc/passwd)" in refused.stderr, refused.stderr
    assert "Cost USD" not in refused.stdout
    assert len(jobs(running, project)) == 1


def test_detach_then_attach_follows_the_logs_until_cancelled(running: Running) -> None:
    project = running.project()
    program = "import time; print('tick', flush=True); time.sleep(600)"
    detached = nodus(
        running, project, "run", "--yes", "--detach", "--image", registry_python_image(), "--name", "long",
        "--", "python", "-c", program,
    )  # fmt: skip
    assert detached.returncode == 0, detached.stderr
    assert detached.stdout.strip().endswith("job/long created")
    assert "nodus attach long -n " + project in detached.stderr
    assert running.job(project, "long")["status"].get("phase") not in ("Succeeded", "Failed", "Cancelled")

    env = {**os.environ, "KUBECONFIG": str(running.cluster.kubeconfig("alice", project))}
    attach = subprocess.Popen(
        [sys.executable, "-m", "nodus.cli.main", "attach", "long", "-n", project],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert attach.stdout is not None
        seen = []
        for line in attach.stdout:
            seen.append(line)
            if line.strip() == "tick":
                break
        assert seen and seen[-1].strip() == "tick", "".join(seen)
        cancel(running, project, "long")
        rest, _ = attach.communicate(timeout=120)
    finally:
        if attach.poll() is None:
            attach.kill()
    out = "".join(seen) + rest
    assert attach.returncode == 1, out
    assert "job/long Cancelled" in out

    again = nodus(running, project, "attach", "long")
    assert again.returncode == 1 and "job/long Cancelled" in again.stdout, again.stdout


def test_attach_to_a_job_that_succeeded_prints_its_summary(running: Running) -> None:
    project = running.project()
    done = nodus(
        running, project, "run", "-y", "-d", "--image", registry_python_image(), "--name", "quick",
        "--", "python", "-c", "print(1)",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    running.wait_phase(project, "quick", "Succeeded")
    attached = nodus(running, project, "attach", "quick", "-n", project)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    assert "job/quick Succeeded" in attached.stdout and "cost: " in attached.stdout
    missing = nodus(running, project, "attach", "nothing-here")
    assert missing.returncode == 1
    assert missing.stderr.startswith("Error from server (NotFound): ")


def test_ctrl_c_detaches_and_the_job_keeps_running(running: Running) -> None:
    project = running.project()
    program = "import time; print('started', flush=True); time.sleep(600)"
    args = [sys.executable, "-m", "nodus.cli.main", "run", "--yes", "--image", registry_python_image()]
    args += ["--name", "sleeper", "-n", project, "--", "python", "-c", program]
    env = {**os.environ, "KUBECONFIG": str(running.cluster.kubeconfig("alice", project)), "TERM": "xterm"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI, its stdout a terminal
        os.execve(sys.executable, args, env)
    output = b""
    try:
        output = _read_until(fd, b"started", 240)
        assert b"started" in output, output.decode(errors="replace")
        os.kill(pid, signal.SIGINT)
        output += _read_until(fd, None, 60)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 130, text
    assert f"nodus attach sleeper -n {project}" in text and f"nodus cancel sleeper -n {project}" in text, text
    job = running.job(project, "sleeper")
    assert job["status"]["phase"] == "Running", job["status"]
    cancel(running, project, "sleeper")
    running.wait_phase(project, "sleeper", "Cancelled")


def _read_until(fd: int, marker: bytes | None, timeout: float) -> bytes:
    """What the pty prints until ``marker`` (None: until the child closes it), within ``timeout`` seconds."""
    data = b""
    while True:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return data
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child exited and the pty closed
            return data
        if not chunk:
            return data
        data += chunk
        if marker is not None and marker in data:
            return data


def test_a_blocked_estimate_creates_nothing(running: Running) -> None:
    project = running.project(credit=None)
    done = nodus(running, project, "run", "--yes", "--image", "python:3.11", "--gpu", "H100:8", "--", "true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "BLOCKED " in done.stdout and "fix: " in done.stdout, done.stdout
    assert "not created: the estimate is blocked" in done.stderr
    assert jobs(running, project) == []


def test_bad_flags_and_no_image_are_refused_before_anything_is_sent(running: Running) -> None:
    project = running.project()
    unknown = nodus(running, project, "run", "--yes", "--gpu", "V100:1", "--", "true")
    assert unknown.returncode == 1
    assert "unknown GPU type 'V100'; known types: B200, H200, H100" in unknown.stderr
    no_image = nodus(running, project, "run", "--yes", "--", "true")
    assert no_image.returncode == 1
    assert "the server announces no default image; pass --image IMAGE" in no_image.stderr
    unasked = nodus(running, project, "run", "--image", "python:3.11", "--gpu", "1", "--", "true")
    assert unasked.returncode == 2
    assert "pass --yes to create without asking" in unasked.stderr
    assert "Cost USD" in unasked.stdout, "the estimate is shown before asking"
    placement = next(line for line in unasked.stdout.splitlines() if line.startswith("Placement "))
    assert re.search(r"-x1-(us|eu|asia)", placement), f"a bare --gpu 1 is any offered type: {placement}"
    refused = nodus(running, project, "run", "--yes", "--image", "python:3.11", "--name", "Bad_Name", "--", "true")
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error from server (Invalid): "), refused.stderr
    # Hostile names stay names: the project and the Job are path segments, never paths or queries.
    for hostile in ("../../projects", "x?dryRun=All", "%2e%2e"):
        elsewhere = nodus(running, project, "run", "--yes", "--image", "python:3.11", "-n", hostile, "--", "true")
        assert elsewhere.returncode == 1, elsewhere.stdout
        assert re.match(r"Error from server \((NotFound|Forbidden)\): ", elsewhere.stderr), elsewhere.stderr
        attached = nodus(running, project, "attach", hostile)
        assert attached.returncode == 1 and "Traceback" not in attached.stderr, attached.stderr
    assert jobs(running, project) == []


def test_checkpoints_and_a_preemption_are_one_line_events(running: Running) -> None:
    project = running.project()
    manifest = running.directory / f"count-{project}.yaml"
    manifest.write_text("kind: Job\nspec:\n  recovery: {checkpoint: {interval: 1m}}\n  resources: {cpu: '1'}\n")
    env = {**os.environ, "KUBECONFIG": str(running.cluster.kubeconfig("alice", project))}
    args = [sys.executable, "-m", "nodus.cli.main", "run", "-f", str(manifest), "--yes", "--name", "count"]
    args += ["--image", registry_python_image(), "--", "/usr/bin/python3", "-c", COUNTER, "400", "0.05"]
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = committed(running, project, "count")
        as_admin(running, "sim", "preempt", first["spec"]["node"], "--notice", "6s")
        out, err = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, out + err
    lines = out.splitlines()
    assert any(line.startswith("* checkpoint 1 committed (") for line in lines), out
    lost = lines.index(next(line for line in lines if line.startswith("* attempt count-0-1 ended Lost (Preempted): ")))
    recovered = next(line for line in lines if line.startswith("* recovered: count-0-2 runs on "))
    final = running.attempts(project, "count")
    seq = next(a for a in final if a["spec"]["number"] == 2)["spec"]["restore"]["seq"]
    assert f"(restored checkpoint {seq}) after count-0-1 was lost (Preempted)" in recovered
    assert lost < lines.index(recovered) < lines.index("done 400")
    assert "job/count Succeeded" in out


def test_a_programs_escape_sequences_do_not_reach_the_terminal(running: Running) -> None:
    project = running.project()
    hostile = r"print('\x1b]0;owned\x07\x1b[2Jcleared \x9b31mred', flush=True)"
    args = [sys.executable, "-m", "nodus.cli.main", "run", "--yes", "--image", registry_python_image()]
    args += ["--name", "hostile", "-n", project, "--", "python", "-c", hostile]
    env = {**os.environ, "KUBECONFIG": str(running.cluster.kubeconfig("alice", project)), "TERM": "xterm"}
    pid, fd = pty.fork()
    if pid == 0:
        os.execve(sys.executable, args, env)
    try:
        output = _read_until(fd, None, 240)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = output.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert "?]0;owned??[2Jcleared ?31mred" in text, text
    assert "\x1b]0;" not in text and "\x1b[2J" not in text and "\x9b" not in text


def test_without_yes_a_terminal_is_asked_and_no_means_nothing_is_created(running: Running) -> None:
    project = running.project()
    env = {**os.environ, "KUBECONFIG": str(running.cluster.kubeconfig("alice", project)), "TERM": "xterm"}
    results = {}
    for answer in (b"n", b"y"):
        args = [sys.executable, "-m", "nodus.cli.main", "run", "--detach", "--image", registry_python_image()]
        args += ["--name", f"asked-{answer.decode()}", "--", "python", "-c", "print(1)"]
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(sys.executable, args, env)
        try:
            output = _read_until(fd, b"[y/N] ", 120)
            assert f"Create job/asked-{answer.decode()} in project {project}? [y/N] ".encode() in output, output
            os.write(fd, answer + b"\n")
            output += _read_until(fd, None, 60)
        finally:
            _, status = os.waitpid(pid, 0)
            os.close(fd)
        results[answer] = (os.waitstatus_to_exitcode(status), output.decode(errors="replace"))
    code, text = results[b"n"]
    assert code == 1 and "not created" in text, text
    code, text = results[b"y"]
    assert code == 0 and "job/asked-y created" in text, text
    assert [job["metadata"]["name"] for job in jobs(running, project)] == ["asked-y"]


def test_every_index_logs_prefixed_and_outputs_with_their_download_command(running: Running, tmp_path: Path) -> None:
    project = running.project()
    manifest = tmp_path / "job.yaml"
    manifest.write_text("kind: Job\nspec:\n  outputs: [{name: result, path: /nodus/outputs/result.txt}]\n")
    program = (
        "import os; i = os.environ['NODUS_INDEX']; print('hello from', i, flush=True); "
        "open('/nodus/outputs/result.txt', 'w').write(f'result {i}')"
    )
    done = nodus(
        running, project, "run", "-f", str(manifest), "--yes", "--image", registry_python_image(), "--name", "fan",
        "--completions", "2", "--logs", "all", "--", "python", "-c", program,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "[0] hello from 0" in lines and "[1] hello from 1" in lines, done.stdout
    assert "job/fan Succeeded" in done.stdout and "(2/2 completed)" in done.stdout
    stored = {o["index"]: o for o in running.job(project, "fan")["status"]["outputs"] if o["name"] == "result"}
    for index in (0, 1):
        assert f"  result  index {index}  8 B  sha256:{stored[index]['sha256']}" in lines, done.stdout
        command = f"nodus outputs get fan result --index {index} -n {project}"
        assert f"    download: {command}" in lines
        target = tmp_path / f"result-{index}.txt"
        got = nodus(running, project, *command.split()[1:], "-o", str(target))
        assert got.returncode == 0, got.stderr
        assert target.read_text() == f"result {index}"
