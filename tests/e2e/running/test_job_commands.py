"""The people's commands against a cluster that runs Jobs, through the real ``nodus`` CLI as a subprocess: ``nodus
jobs`` lists phase and cost (``-A`` every readable project, and no other), ``nodus describe`` shows where attempts
ran and the cost by segment, ``nodus suspend|resume|cancel`` change ``spec.state`` (the server's refusals printed
with their fix: a Viewer's 403, a Cancelled Job that stays Cancelled), a terminal gets colours and a pipe plain
text, a teammate's escape sequences never reach the terminal, and the completion scripts complete commands and Job
names in a real bash and a real interactive zsh (the Debian ``zsh`` package)."""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from nodus.cli import jobtables
from tests.e2e.running.conftest import Running
from tests.support.objects import API, job

pytestmark = pytest.mark.e2e


def nodus(running: Running, user: str, *args: str, project: str = "default") -> subprocess.CompletedProcess[str]:
    """``nodus ARGS`` as ``user`` (their kubeconfig's project: ``project``), stdout a pipe as in a script."""
    env = {"KUBECONFIG": str(running.cluster.kubeconfig(user, project)), "PATH": os.environ["PATH"], "HOME": "/tmp"}
    return subprocess.run(
        [sys.executable, "-m", "nodus", *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def on_terminal(running: Running, user: str, *args: str) -> str:
    """What ``nodus ARGS`` writes to a terminal (a pseudo-terminal, TERM=xterm-256color), escape codes and all."""
    env = {"KUBECONFIG": str(running.cluster.kubeconfig(user)), "PATH": os.environ["PATH"], "HOME": "/tmp"}
    primary, secondary = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "nodus", *args],
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "TERM": "xterm-256color", "COLUMNS": "200"},
    )
    os.close(secondary)
    out = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the terminal closes when the process exits
            break
        if not chunk:
            break
        out += chunk
    os.close(primary)
    _, errors = process.communicate(timeout=60)
    assert process.returncode == 0, errors
    return out.decode()


def shell_job(running: Running, project: str, name: str, script: str, **spec: Any) -> None:
    body = job(name, command=["/bin/sh", "-c", script], **spec)
    body["spec"]["resources"] = {"cpu": "1"}
    with running.client() as client:
        response = client.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert response.status_code == 201, response.text


def project_with(running: Running, members: list[dict[str, str]]) -> str:
    name = f"cmd-{uuid.uuid4().hex[:8]}"
    with running.client() as client:
        body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}}
        response = client.post(f"{API}/projects", json={**body, "spec": {"members": members}})
        assert response.status_code == 201, response.text
        granted = client.post(f"{API}/projects/{name}/credits", json={"amountUSD": "100", "key": "start"})
        assert granted.status_code == 201, granted.text
    return name


def rows(text: str) -> dict[str, list[str]]:
    """A listing's rows by their NAME cell (or PROJECT/NAME with a PROJECT column)."""
    lines = text.splitlines()
    headers = lines[0].split()
    out = {}
    for line in lines[1:]:
        cells = line.split()
        key = f"{cells[0]}/{cells[1]}" if headers[0] == "PROJECT" else cells[0]
        out[key] = cells
    return out


def section(text: str, title: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def test_jobs_and_describe_show_phase_cost_attempts_and_the_cost_by_segment(running: Running) -> None:
    project = running.project()
    shell_job(running, project, "hello", "echo hello")
    running.wait_phase(project, "hello", "Succeeded")

    def charged() -> dict[str, Any] | None:
        current = running.job(project, "hello")
        return current if (current["status"].get("cost") or {}).get("final") else None

    done = running.wait_for("the final charge", charged)
    listed = nodus(running, "alice", "jobs", "-n", project)
    assert listed.returncode == 0, listed.stderr
    assert "\x1b" not in listed.stdout
    assert listed.stdout.splitlines()[0].split() == ["NAME", "PHASE", "COMPLETIONS", "COST", "AGE"]
    total = done["status"]["cost"]["totalUSD"]
    assert rows(listed.stdout)["hello"][:4] == ["hello", "Succeeded", "1/1", jobtables.money(total)]
    coloured = on_terminal(running, "alice", "jobs", "-n", project)
    assert "\x1b[32mSucceeded" in coloured and "\x1b[1mNAME" in coloured, coloured  # green phase, bold header

    described = nodus(running, "alice", "describe", "hello", project=project)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert "\x1b" not in text
    [attempt] = running.attempts(project, "hello")
    shown = section(text, "Attempts")[1].split()
    assert shown[:5] == [
        attempt["metadata"]["name"], "0", "Succeeded", attempt["spec"]["node"], attempt["spec"]["offering"]
    ]  # fmt: skip
    cost = {line.split()[0]: line.split()[1] for line in section(text, "Cost")[1:]}
    segments = done["status"]["cost"]["bySegment"]
    assert cost["Running"] == jobtables.money(segments["runningUSD"]) and cost["Boot"] == jobtables.money(
        segments["bootUSD"]
    )
    assert cost["Total"] == jobtables.money(total) and "(final)" in text
    p50 = done["status"]["estimate"]["costUSD"]["p50"]
    assert f"{jobtables.money(p50)} (P50)" in "\n".join(section(text, "Estimate vs actual"))
    assert any(line.split()[0] == "Complete" for line in section(text, "Conditions")[1:])
    assert "Job Succeeded" in "\n".join(section(text, "Events"))


def test_every_project_lists_the_readable_projects_only(running: Running) -> None:
    first, second = running.project(), running.project()
    foreign = project_with(running, [{"name": "bob", "role": "Owner"}])
    for project, name in ((first, "in-first"), (second, "in-second"), (foreign, "in-foreign")):
        shell_job(running, project, name, "sleep 60", state="Suspended")
    listed = nodus(running, "alice", "jobs", "-A")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split()[:2] == ["PROJECT", "NAME"]
    found = rows(listed.stdout)
    assert found[f"{first}/in-first"][2] in ("-", "Pending", "Suspended") and found[f"{first}/in-first"][3] == "0/1"
    assert f"{second}/in-second" in found
    assert not any(key.startswith(f"{foreign}/") for key in found)
    by_bob = rows(nodus(running, "bob", "jobs", "-A").stdout)
    assert f"{foreign}/in-foreign" in by_bob and f"{first}/in-first" not in by_bob
    only = nodus(running, "alice", "jobs", "-n", second, "--names-only")
    assert only.stdout.split() == ["in-second"]


def test_suspend_resume_and_cancel_change_the_state_and_the_job_follows(running: Running) -> None:
    project = running.project()
    shell_job(running, project, "pausable", "sleep 300")
    running.wait_phase(project, "pausable", "Running")
    suspended = nodus(running, "alice", "suspend", "pausable", "-n", project)
    assert (suspended.returncode, suspended.stdout) == (0, "job/pausable suspended\n"), suspended.stderr
    assert running.job(project, "pausable")["spec"]["state"] == "Suspended"
    running.wait_phase(project, "pausable", "Suspended", timeout=120)
    again = nodus(running, "alice", "suspend", "pausable", "-n", project)
    assert again.stdout == "job/pausable unchanged: its state is already Suspended (phase Suspended)\n"

    resumed = nodus(running, "alice", "resume", "job/pausable", "-n", project)  # kubectl's form too
    assert (resumed.returncode, resumed.stdout) == (0, "job/pausable resumed\n"), resumed.stderr
    running.wait_phase(project, "pausable", "Running", timeout=120)
    cancelled = nodus(running, "alice", "cancel", "pausable", "-n", project)
    assert (cancelled.returncode, cancelled.stdout) == (0, "job/pausable cancelled\n"), cancelled.stderr
    assert running.job(project, "pausable")["spec"]["state"] == "Cancelled"
    running.wait_phase(project, "pausable", "Cancelled", timeout=120)

    refused = nodus(running, "alice", "resume", "pausable", "missing", "-n", project)
    assert refused.returncode == 1 and refused.stdout == ""
    first, fix, missing, _ = refused.stderr.split("\n", 3)
    assert first.startswith("Error from server (Invalid): ") and "so its state stays Cancelled" in first
    assert fix.startswith("  fix: ")
    assert missing == 'Error from server (NotFound): jobs.nodus.dev "missing" not found'
    assert running.job(project, "pausable")["spec"]["state"] == "Cancelled"


def test_a_viewers_cancel_is_refused_with_the_servers_403(running: Running) -> None:
    project = project_with(running, [{"name": "alice", "role": "Owner"}, {"name": "dave", "role": "Viewer"}])
    shell_job(running, project, "precious", "sleep 60", state="Suspended")
    listed = nodus(running, "dave", "jobs", project=project)
    assert listed.returncode == 0 and "precious" in rows(listed.stdout), listed.stderr
    refused = nodus(running, "dave", "cancel", "precious", project=project)
    assert refused.returncode == 1 and refused.stdout == ""
    message, fix = refused.stderr.splitlines()[:2]
    assert message.startswith("Error from server (Forbidden): ") and "dave" in message, message
    assert fix.startswith("  fix: ") and "spec.members" in fix
    assert running.job(project, "precious")["spec"]["state"] == "Suspended"


@pytest.mark.parametrize(
    "given",
    [
        pytest.param("kept/status", id="a-subresource"),
        pytest.param("../kept", id="a-parent"),
        pytest.param("kept%2Fstatus", id="encoded-slash"),
        pytest.param("Kept", id="upper-case"),
        pytest.param("kept\x1b[2J", id="an-escape"),
    ],
)
def test_what_cannot_name_a_job_is_refused_before_any_request(running: Running, given: str) -> None:
    project = running.project()
    shell_job(running, project, "kept", "sleep 60", state="Suspended")
    for command in ("cancel", "resume", "describe"):
        refused = nodus(running, "alice", command, given, "-n", project)
        assert refused.returncode == 1 and refused.stdout == ""
        assert refused.stderr.startswith(f"nodus: {given!r} is not a Job name: "), refused.stderr
        assert "\x1b" not in refused.stderr
    assert running.job(project, "kept")["spec"]["state"] == "Suspended"
    elsewhere = nodus(running, "alice", "cancel", "kept", "-n", f"{project}/jobs/kept")
    assert elsewhere.returncode == 1 and "is not a project name" in elsewhere.stderr
    assert running.job(project, "kept")["spec"]["state"] == "Suspended"


def test_describe_of_a_missing_job_is_kubectls_not_found(running: Running) -> None:
    project = running.project()
    missing = nodus(running, "alice", "describe", "nope", "-n", project)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.splitlines()[0] == 'Error from server (NotFound): jobs.nodus.dev "nope" not found'


def test_escape_sequences_in_a_teammates_job_never_reach_the_terminal(running: Running) -> None:
    project = project_with(running, [{"name": "alice", "role": "Owner"}, {"name": "dave", "role": "Viewer"}])
    # A command that carries an OSC 52 clipboard write and a screen clear, which its program also prints as the
    # last lines it logs before failing (the Job's message quotes them).
    hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2Jpwned"
    script = f"printf '%s\\n' 'step 1' '{hostile}'; exit 3"
    shell_job(running, project, "hostile", script, backoffLimit=0)
    failed = running.wait_phase(project, "hostile", "Failed")
    assert hostile in failed["spec"]["command"][2]  # the server keeps what was asked, bytes and all
    described = nodus(running, "dave", "describe", "hostile", "-n", project)
    assert described.returncode == 0, described.stderr
    assert "\x1b" not in described.stdout and "\x07" not in described.stdout
    assert "^[]52;c;cm0gLXJmIH4=^G^[[2Jpwned" in "\n".join(section(described.stdout, "Spec"))
    assert "pwned" in "\n".join(section(described.stdout, "Status"))


def completions(running: Running, project: str, line: str, split_at_equals: bool = False) -> list[str]:
    """What bash offers for ``line`` (the cursor at its end) with ``nodus completion bash`` loaded. With
    ``split_at_equals`` the words are split at '=' as bash's default COMP_WORDBREAKS splits them."""
    script = nodus(running, "alice", "completion", "bash")
    assert script.returncode == 0, script.stderr
    path = running.directory / f"nodus-completion-{uuid.uuid4().hex[:6]}.bash"
    path.write_text(script.stdout)
    words = shlex.split(line) + ([""] if line.endswith(" ") else [])
    if split_at_equals:
        words = [part for word in words for part in re.split(r"(=)", word) if part or word == ""]
    drive = (
        f"source {shlex.quote(str(path))}\n"
        f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
        f"COMP_CWORD={len(words) - 1}\nCOMP_LINE={shlex.quote(line)}\nCOMP_POINT=${{#COMP_LINE}}\n"
        'complete -p nodus >/dev/null && _shtab_nodus nodus && printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    venv = str(Path(sys.executable).parent)
    env = {"KUBECONFIG": str(running.cluster.kubeconfig("alice", project)), "PATH": f"{venv}:/usr/bin:/bin"}
    done = subprocess.run(
        ["bash", "--norc", "-c", drive], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_completion_scripts_complete_commands_flags_and_job_names(running: Running) -> None:
    project = running.project()
    other = running.project()
    shell_job(running, project, "train-a", "sleep 60", state="Suspended")
    shell_job(running, project, "train-b", "sleep 60", state="Suspended")
    shell_job(running, other, "eval-c", "sleep 60", state="Suspended")
    bash = nodus(running, "alice", "completion", "bash")
    assert bash.returncode == 0 and "_shtab_nodus" in bash.stdout
    checked = subprocess.run(["bash", "-n"], input=bash.stdout, capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr
    zsh = nodus(running, "alice", "completion", "zsh")
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef nodus")
    assert "_nodus_job_names" in zsh.stdout and "describe" in zsh.stdout

    assert completions(running, project, "nodus descr") == ["describe"]
    assert completions(running, project, "nodus jobs --all-p") == ["--all-projects"]
    assert completions(running, project, "nodus describe train") == ["train-a", "train-b"]
    assert completions(running, project, "nodus cancel ") == ["train-a", "train-b"]
    assert completions(running, project, f"nodus suspend -n {other} ") == ["eval-c"]
    assert completions(running, project, f"nodus suspend --project={other} ") == ["eval-c"]
    assert completions(running, project, f"nodus suspend --project={other} ", split_at_equals=True) == ["eval-c"]
    assert completions(running, project, "nodus logs job/train-") == ["job/train-a", "job/train-b"]


def zsh_line(running: Running, project: str, typed: str, *expected: str, tabs: int = 1) -> str:
    """What an interactive zsh (compinit, ``nodus completion zsh`` on its fpath) shows after ``typed`` and
    ``tabs`` presses of Tab, once every ``expected`` text is on the screen (or 30 s pass without output): its
    terminal output with the control sequences removed."""
    home = running.directory / f"zsh-{uuid.uuid4().hex[:6]}"
    home.mkdir()
    script = nodus(running, "alice", "completion", "zsh")
    assert script.returncode == 0, script.stderr
    (home / "_nodus").write_text(script.stdout)
    (home / ".zshrc").write_text(f"fpath=({home} $fpath)\nautoload -Uz compinit && compinit -u -D\nPROMPT='> '\n")
    venv = str(Path(sys.executable).parent)
    env = {"ZDOTDIR": str(home), "HOME": str(home), "TERM": "dumb", "PATH": f"{venv}:/usr/bin:/bin"}
    env["KUBECONFIG"] = str(running.cluster.kubeconfig("alice", project))
    primary, secondary = os.openpty()
    shell = subprocess.Popen(
        ["zsh", "-i"], stdin=secondary, stdout=secondary, stderr=secondary, env=env, start_new_session=True
    )
    os.close(secondary)
    try:
        read_until(primary, lambda text: "> " in text)
        os.write(primary, typed.encode() + b"\t" * tabs)
        return read_until(primary, lambda text: all(e in text for e in expected))
    finally:
        shell.kill()
        shell.wait()
        os.close(primary)


def read_until(fd: int, done: Any, quiet: float = 30.0) -> str:
    """Terminal output until ``done(text)`` or until nothing more comes for ``quiet`` seconds."""
    out = b""
    while True:
        ready, _, _ = select.select([fd], [], [], quiet)
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
        if done(text):
            return text
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))


def test_zsh_completes_commands_and_job_names(running: Running) -> None:
    if shutil.which("zsh") is None:
        pytest.fail("zsh is not installed: apt-get install zsh (.ci/install-system-packages)")
    project, other = running.project(), running.project()
    for name in ("alpha-job", "alps-job"):
        shell_job(running, project, name, "sleep 60", state="Suspended")
    shell_job(running, other, "gamma-job", "sleep 60", state="Suspended")

    def completes(typed: str, *expected: str, tabs: int = 1) -> str:
        shown = zsh_line(running, project, typed, *expected, tabs=tabs)
        assert all(e in shown for e in expected), shown
        return shown

    completes("nodus descr", "nodus describe ")
    completes("nodus describe alph", "nodus describe alpha-job ")
    assert "gamma-job" not in completes("nodus cancel al", "alpha-job", "alps-job", tabs=2)
    completes(f"nodus suspend -n {other} g", f"nodus suspend -n {other} gamma-job ")
    completes("nodus logs job/alph", "nodus logs job/alpha-job ")
