"""The web console in a real browser (headless Chromium driven by Playwright) against the real running cluster.

A person logs in with a one-time link, watches a Job appear and change phase without reloading, reads its log as
it streams, and cancels it; a Viewer of the same project sees no Cancel button and is refused (403) when the page
sends the PATCH anyway. The estimate page creates a Job bound to the estimate it shows; the offerings, projects,
credits and Pipeline pages render. axe-core finds no serious or critical accessibility violation on the login,
Jobs, Job, estimate and offerings pages, and no page trips the Content-Security-Policy. Hostile text (a log line
of HTML, a route naming a script) is shown as text or refused. Screenshots go to a directory of the test run and,
with NODUS_CONSOLE_SCREENSHOTS=DIR, to DIR as well (docs/console.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import re
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from nodus.apimachinery.estimates import RATE_CEILING
from nodus.storage import database
from tests.conftest import make_project
from tests.e2e.running.conftest import Running
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create
from tests.e2e.running.test_recovery import committed, counter
from tests.support import browser as browsers
from tests.support import cluster as clusters
from tests.support.images import registry_python_image
from tests.support.objects import API, job

pytestmark = pytest.mark.e2e
T = TypeVar("T")

# Slow enough to be watched, long enough to be cancelled: a tick every 0.3 s with progress, after one line of
# HTML that must be shown as text (an <img onerror> would set window.pwned if it were ever parsed as markup).
TICKER = (
    "import json, os, time\n"
    "print('<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>', flush=True)\n"
    "for i in range(1, 2001):\n"
    "    print(f'tick {i}', flush=True)\n"
    "    with open(os.environ['NODUS_PROGRESS_FILE'], 'a') as f:\n"
    "        f.write(json.dumps({'completed': i, 'total': 2000, 'metrics': {'loss': 1 / i}}) + '\\n')\n"
    "    time.sleep(0.3)\n"
)
LONG = 120_000  # ms: a Job's first attempt boots a simulated host


def job_body(name: str, script: str = TICKER) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "image": registry_python_image(),
            "command": ["python3", "-c", script],
            "resources": {"cpu": "1"},
            "placement": {"offerings": ["cpu-8c-us"]},
        },
    }


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    browsers.require_built_console()
    with browsers.chromium() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> browsers.Screenshots:
    return browsers.Screenshots(tmp_path_factory.mktemp("console-screenshots"))


@pytest.fixture(scope="module")
def project(running: Running) -> str:
    """A project where alice is Owner and bob a Viewer, with credit."""
    name = f"console-{uuid.uuid4().hex[:8]}"
    members = [{"name": "alice", "role": "Owner"}, {"name": "bob", "role": "Viewer"}]
    body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {"members": members}}
    with running.client() as admin:
        assert admin.post(f"{API}/projects", json=body).status_code == 201
        granted = admin.post(f"{API}/projects/{name}/credits", json={"amountUSD": "500", "key": "start"})
        assert granted.status_code == 201, granted.text
    return name


def logged_in(
    browser: Browser, running: Running | clusters.Cluster, user: str
) -> tuple[BrowserContext, Page, browsers.PageProblems]:
    """A fresh browser context logged in as ``user`` through a one-time link; the page is where the link lands."""
    context = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    problems = browsers.PageProblems(page)
    cluster = running.cluster if isinstance(running, Running) else running

    def ready() -> None:
        expect(page).to_have_url(f"{cluster.url}/console/#/projects/default/jobs")
        expect(page.locator("#user")).to_have_text(user)

    browsers.navigate(page, problems, lambda: browsers.login_link(cluster, user), ready)
    return context, page, problems


def create_job(running: Running, project: str, name: str, user: str = "alice") -> None:
    with running.client(user) as client:
        created = client.post(f"{API}/namespaces/{project}/jobs", json=job_body(name))
        assert created.status_code == 201, created.text


def cancel_by_api(running: Running, project: str, name: str) -> None:
    with running.client() as admin:
        admin.patch(
            f"{API}/namespaces/{project}/jobs/{name}",
            json={"spec": {"state": "Cancelled"}},
            headers={"Content-Type": "application/merge-patch+json"},
        )


def assert_accessible(page: Page, what: str) -> None:
    violations = browsers.serious_violations(page)
    assert not violations, f"axe-core on the {what} page:\n{json.dumps(violations, indent=1)}"


def test_login_page_is_accessible(browser: Browser, running: Running, screenshots: browsers.Screenshots) -> None:
    context = browser.new_context(ignore_https_errors=True)
    page = context.new_page()
    problems = browsers.PageProblems(page)

    def ready() -> None:
        expect(page).to_have_url(re.compile(r"/console/login"))
        expect(page.locator("form")).to_be_visible()

    browsers.navigate(page, problems, lambda: f"{running.cluster.url}/console/", ready)
    screenshots.take(page, "login")
    assert_accessible(page, "login")
    assert problems.problems == []
    context.close()


def test_a_job_appears_live_streams_its_log_and_is_cancelled_from_its_page(
    browser: Browser, running: Running, project: str, screenshots: browsers.Screenshots
) -> None:
    context, page, problems = logged_in(browser, running, "alice")
    page.goto(f"{running.cluster.url}/console/#/projects/{project}/jobs")
    expect(page.get_by_role("heading", name=f"Jobs in {project}")).to_be_visible()
    expect(page.locator(".live")).to_have_text("● live", timeout=LONG)
    page.evaluate("window.notReloaded = true")

    name = f"ticker-{uuid.uuid4().hex[:6]}"
    create_job(running, project, name)
    try:
        row = page.get_by_test_id(f"job-row-{name}")
        expect(row).to_be_visible(timeout=30_000)
        first_phase = row.get_by_test_id("job-phase").inner_text()
        assert first_phase != "Running", "the row should appear before the Job runs (it has a host to boot)"
        expect(row.get_by_test_id("job-phase")).to_have_text("Running", timeout=LONG)
        assert page.evaluate("window.notReloaded") is True, "the Jobs page reloaded instead of updating in place"
        screenshots.take(page, "jobs")
        assert_accessible(page, "Jobs")

        row.get_by_role("link", name=name).click()
        expect(page).to_have_url(f"{running.cluster.url}/console/#/projects/{project}/jobs/{name}")
        log = page.get_by_test_id("log-view")
        expect(log).to_contain_text("tick 3", timeout=LONG)
        seen = max(int(n) for n in re.findall(r"tick (\d+)", log.inner_text()))
        expect(log).to_contain_text(f"tick {seen + 5}", timeout=30_000)  # more lines arrive on the same stream
        # The program's HTML line is text: no element was made of it and nothing ran.
        expect(log).to_contain_text('<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>')
        assert log.locator("img, script").count() == 0
        assert page.evaluate("window.pwned") is None

        expect(page.get_by_test_id("job-phase")).to_have_text("Running")
        expect(page.locator("svg[role=img]").first).to_be_visible()  # the timeline
        expect(page.get_by_role("table", name="Attempts")).to_contain_text(f"{name}-0-1")
        # Progress and the loss metric, plotted from the progress history (uPlot draws on canvases).
        expect(page.locator("figure.chart canvas").first).to_be_visible(timeout=30_000)
        screenshots.take(page, "job")
        assert_accessible(page, "Job")
        page.get_by_text("YAML", exact=True).click()  # the Job as the server renders it (Accept: application/yaml)
        expect(page.get_by_label("The Job as YAML")).to_contain_text("kind: Job\nmetadata:")
        expect(page.get_by_label("The Job as YAML")).to_contain_text(f"name: {name}")

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_test_id("cancel-job").click()
        running.wait_for(
            "the Job's spec.state to be Cancelled", lambda: running.job(project, name)["spec"]["state"] == "Cancelled"
        )
        expect(page.get_by_test_id("job-phase")).to_have_text("Cancelled", timeout=LONG)
        expect(page.get_by_test_id("cancel-job")).to_have_count(0)
        assert page.evaluate("window.notReloaded") is True
        assert problems.problems == []
    finally:
        cancel_by_api(running, project, name)
        context.close()


def test_a_viewer_sees_no_cancel_button_and_a_patch_from_the_page_is_forbidden(
    browser: Browser, running: Running, project: str
) -> None:
    name = f"watched-{uuid.uuid4().hex[:6]}"
    create_job(running, project, name)
    owner, owner_page, _ = logged_in(browser, running, "alice")
    viewer, page, problems = logged_in(browser, running, "bob")
    try:
        job_page = f"{running.cluster.url}/console/#/projects/{project}/jobs/{name}"
        owner_page.goto(job_page)
        page.goto(job_page)
        expect(page.get_by_test_id("job-phase")).to_have_text("Running", timeout=LONG)
        expect(page.get_by_test_id("log-view")).to_contain_text("tick 1", timeout=LONG)
        # The Owner, on the same Job at the same time, is offered Cancel: the viewer's page lacks it for their role.
        expect(owner_page.get_by_test_id("cancel-job")).to_be_visible(timeout=30_000)
        expect(page.get_by_test_id("cancel-job")).to_have_count(0)

        answer = page.evaluate(
            """async ([path]) => {
                const session = await (await fetch('/console/api/session')).json();
                const body = JSON.stringify({spec: {state: 'Cancelled'}});
                const send = (headers) => fetch(path, {method: 'PATCH', body,
                    headers: {'Content-Type': 'application/merge-patch+json', ...headers}});
                const withToken = await send({'X-CSRF-Token': session.csrfToken});
                const withoutToken = await send({});
                return {user: session.user, status: withToken.status, body: await withToken.json(),
                        withoutToken: withoutToken.status};
            }""",
            [f"{API}/namespaces/{project}/jobs/{name}"],
        )
        assert answer["user"] == "bob"
        assert answer["status"] == 403, answer
        assert answer["body"]["reason"] == "Forbidden", answer
        assert answer["withoutToken"] == 403, answer
        assert running.job(project, name)["spec"].get("state", "Running") == "Running"
        assert problems.problems == []
    finally:
        cancel_by_api(running, project, name)
        owner.close()
        viewer.close()


def test_the_estimate_page_creates_a_job_bound_to_the_estimate_it_shows(
    browser: Browser, running: Running, project: str, screenshots: browsers.Screenshots
) -> None:
    context, page, problems = logged_in(browser, running, "alice")
    try:
        page.goto(f"{running.cluster.url}/console/#/projects/{project}/estimate")
        text = page.get_by_label("A Job or Pipeline, as YAML or JSON")
        expect(text).to_be_visible()
        # Two documents are refused in the page, before anything is sent.
        text.fill("kind: Job\n---\nkind: Job\n")
        page.get_by_role("button", name="Estimate").click()
        expect(page.get_by_role("alert")).to_contain_text("exactly one Job or Pipeline")
        # A "billion laughs" of nested aliases (10^9 nodes from a few lines) is refused while reading it.
        laughs = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
        laughs += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
        text.fill("kind: Job\nspec:\n" + "\n".join(f"  {line}" for line in laughs) + "\n")
        page.get_by_role("button", name="Estimate").click()
        expect(page.get_by_role("alert")).to_contain_text("alias count")

        name = f"estimated-{uuid.uuid4().hex[:6]}"
        text.fill(
            "apiVersion: nodus.dev/v1\nkind: Job\n"
            f"metadata:\n  name: {name}\n"
            f"spec:\n  image: {registry_python_image()}\n"
            "  command: [/bin/sh, -c, 'echo estimated; echo report-bytes > /workspace/report.txt']\n"
            "  outputs: [{name: report, path: /workspace/report.txt}]\n"
            "  resources: {cpu: '1'}\n  expectedDuration: 30s\n  placement: {offerings: [cpu-8c-us]}\n"
        )
        page.get_by_role("button", name="Estimate").click()
        estimate = page.get_by_role("region", name=f"Estimate for {name}")
        expect(estimate).to_contain_text("Cost P50", timeout=30_000)
        expect(estimate).to_contain_text("cpu-8c-us")
        screenshots.take(page, "estimate")
        assert_accessible(page, "estimate")
        with running.client("alice") as alice:
            assert alice.get(f"{API}/namespaces/{project}/jobs/{name}").status_code == 404, "a dry run stores nothing"

        page.get_by_role("button", name="Create Job").click()
        expect(page).to_have_url(f"{running.cluster.url}/console/#/projects/{project}/jobs/{name}")
        expect(page.get_by_test_id("job-phase")).to_be_visible()
        annotations = running.job(project, name)["metadata"].get("annotations") or {}
        assert RATE_CEILING in annotations, f"the create was not bound to the estimate: {annotations}"
        expect(page.get_by_test_id("job-phase")).to_have_text("Succeeded", timeout=LONG)
        expect(page.get_by_test_id("log-view")).to_contain_text("estimated", timeout=30_000)
        # Its output downloads from the page, with the session cookie, as the bytes the program wrote.
        report = browsers.download(page, page.get_by_role("link", name="Download report of index 0"))
        assert report.suggested_filename == "report.txt"
        assert Path(report.path()).read_bytes() == b"report-bytes\n"
        assert problems.problems == []
    finally:
        context.close()


def test_offerings_projects_credits_and_hostile_routes(
    browser: Browser, running: Running, project: str, screenshots: browsers.Screenshots
) -> None:
    context, page, problems = logged_in(browser, running, "alice")
    try:
        page.goto(f"{running.cluster.url}/console/#/offerings")
        table = page.get_by_role("table")
        expect(table.locator("tbody tr").first).to_be_visible()
        total = table.locator("tbody tr").count()
        page.get_by_label("Filter").fill("cpu-8c-us")
        expect(table.locator("tbody tr")).not_to_have_count(total)
        for row_text in table.locator("tbody tr").all_inner_texts():
            assert "cpu-8c-us" in row_text, row_text
        page.get_by_label("Filter").fill("")
        expect(table.locator("tbody tr")).to_have_count(total)
        page.get_by_label("Filter").fill("h100")
        expect(table.locator("tbody tr")).not_to_have_count(total)
        screenshots.take(page, "offerings")
        assert_accessible(page, "offerings")

        page.goto(f"{running.cluster.url}/console/#/projects")
        row = page.get_by_test_id(f"project-row-{project}")
        expect(row).to_contain_text(re.compile(r"\$\d+\.\d\d available of \$\d+\.\d\d"), timeout=30_000)
        screenshots.take(page, "projects")
        assert_accessible(page, "projects")

        page.goto(f"{running.cluster.url}/console/#/projects/{project}/credits")
        expect(page.get_by_role("region", name="Credit")).to_contain_text("Available")
        expect(page.locator("figure.chart")).to_be_visible()
        screenshots.take(page, "credits")
        assert_accessible(page, "credits")

        # Routes naming markup or other paths are not pages: nothing is requested or rendered from them.
        for hostile in (
            "#/projects/%3Cimg%20src%3Dx%20onerror%3Dwindow.pwned%3D1%3E/jobs",
            "#/projects/..%2F..%2Fapis/jobs",
        ):
            page.goto(f"{running.cluster.url}/console/{hostile}")
            expect(page.get_by_role("heading", name="Not found")).to_be_visible()
            assert page.locator("main img").count() == 0
        assert page.evaluate("window.pwned") is None
        assert problems.problems == []
    finally:
        context.close()


def test_a_pipeline_is_drawn_as_a_graph_of_its_stages(
    browser: Browser, running: Running, project: str, screenshots: browsers.Screenshots
) -> None:
    stage = job_body("unused", "print('stage')")["spec"]
    stages = [
        {"name": "data", "template": {"spec": stage}},
        {"name": "train", "dependsOn": ["data"], "template": {"spec": stage}},
        {"name": "report", "dependsOn": ["data", "train"], "template": {"spec": stage}},
    ]
    name = f"graph-{uuid.uuid4().hex[:6]}"
    body = {"apiVersion": "nodus.dev/v1", "kind": "Pipeline", "metadata": {"name": name}, "spec": {"stages": stages}}
    with running.client("alice") as alice:
        created = alice.post(f"{API}/namespaces/{project}/pipelines", json=body)
        assert created.status_code == 201, created.text
    context, page, problems = logged_in(browser, running, "alice")
    try:
        page.goto(f"{running.cluster.url}/console/#/projects/{project}/pipelines")
        page.get_by_test_id(f"pipeline-row-{name}").get_by_role("link", name=name).click()
        graph = page.locator("figure.graph svg")
        expect(graph.locator("g.stage")).to_have_count(3)
        expect(graph.locator("path.edge")).to_have_count(3)
        # The first stage runs and succeeds: its box changes colour in place and links to its Job.
        expect(graph.locator("g.stage.phase-good").first).to_be_visible(timeout=LONG)
        expect(graph.locator("a").first).to_have_attribute("href", re.compile(rf"#/projects/{project}/jobs/{name}-"))
        screenshots.take(page, "pipeline")
        assert_accessible(page, "Pipeline")
        assert problems.problems == []
    finally:
        context.close()


def test_a_preemption_and_restore_are_marked_and_the_log_follows_the_replacement(
    browser: Browser, running: Running, project: str, screenshots: browsers.Screenshots
) -> None:
    create(running, project, "recovered", **counter(300, 0.05))
    context, page, problems = logged_in(browser, running, "alice")
    try:
        page.goto(f"{running.cluster.url}/console/#/projects/{project}/jobs/recovered")
        log = page.get_by_test_id("log-view")
        expect(log).to_contain_text("count 5", timeout=LONG)
        first = committed(running, project, "recovered")
        nodus(running, "sim", "preempt", first["spec"]["node"], "--notice", "6s")

        # On "latest" the same view goes on with the replacement, which says what it restored.
        expect(log).to_contain_text("──── attempt 2 ────", timeout=LONG)
        expect(log).to_contain_text(re.compile(r"start \d+ restored \d+"), timeout=LONG)
        expect(page.get_by_test_id("job-phase")).to_have_text("Succeeded", timeout=LONG)
        lost, replacement = sorted(running.attempts(project, "recovered"), key=lambda a: a["spec"]["number"])
        attempts = page.get_by_role("table", name="Attempts")
        expect(attempts.get_by_role("row", name=re.compile(lost["metadata"]["name"]))).to_contain_text("✕ preempted")
        expect(attempts.get_by_role("row", name=re.compile(replacement["metadata"]["name"]))).to_contain_text(
            f"↺ checkpoint {replacement['spec']['restore']['seq']}"
        )
        timeline = page.locator("figure.timeline svg")
        expect(timeline.locator("text.marker.bad")).to_have_count(1)  # the preempted attempt's end
        expect(timeline.locator("text.marker:not(.bad)")).to_have_count(1)  # the replacement's restore
        screenshots.take(page, "job-recovered")
        assert_accessible(page, "recovered Job")
        assert problems.problems == []
    finally:
        context.close()


@pytest.fixture(scope="module")
def short_watches(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[clusters.Cluster]:
    """An API server of its own whose watches end after 2 to 4 seconds (and send no bookmarks)."""
    directory = tmp_path_factory.mktemp("console-watches")
    url = off_the_loop(database.create_database(database_server))
    try:
        flags = ("--min-request-timeout", "2", "--watch-bookmark-interval", "1h")
        cluster = clusters.start(directory, url, extra_args=flags)
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        off_the_loop(database.drop_database(url))


def off_the_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end on a thread of its own: Playwright's sync API keeps an event loop running on
    this one once a browser is open, where asyncio.run is refused."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def test_the_jobs_page_watches_again_from_where_it_was_when_the_server_ends_its_watch(
    browser: Browser, short_watches: clusters.Cluster
) -> None:
    with short_watches.client() as admin:
        project = make_project(admin, members=[{"name": "alice", "role": "Owner"}], prefix="watch")
    context, page, problems = logged_in(browser, short_watches, "alice")
    jobs = f"{API}/namespaces/{project}/jobs?"
    lists: list[str] = []
    watches: list[str] = []
    page.on("request", lambda r: (watches if "watch=1" in r.url else lists).append(r.url) if jobs in r.url else None)
    try:
        page.goto(f"{short_watches.url}/console/#/projects/{project}/jobs")
        expect(page.locator(".live")).to_have_text("● live", timeout=30_000)

        def create(name: str) -> None:
            with short_watches.client("alice") as alice:
                created = alice.post(f"{API}/namespaces/{project}/jobs", json=job(name))
                assert created.status_code == 201, created.text

        # The server ends each watch after a few seconds: the page watches again from where it was.
        create("first")
        expect(page.get_by_test_id("job-row-first")).to_be_visible()
        resumed = len(watches)
        wait_until(page, "the page to watch again after the server ended its watch", lambda: len(watches) > resumed)
        create("second")
        expect(page.get_by_test_id("job-row-second")).to_be_visible()
        create("third")
        for name in ("first", "second", "third"):
            expect(page.get_by_test_id(f"job-row-{name}")).to_be_visible()
        # Each new watch started from the version the page had seen, never from the start (no list in between).
        assert len(lists) == 1, lists
        versions = [int(parse_qs(urlsplit(url).query)["resourceVersion"][0]) for url in watches]
        assert len(versions) >= 2 and versions == sorted(versions) and versions[-1] > versions[0], watches
        expect(page.locator(".live")).to_have_text("● live")
        assert problems.problems == []
    finally:
        context.close()


def wait_until(page: Page, what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    """Wait for ``check()`` while the page runs (Playwright delivers the page's events while it waits)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        page.wait_for_timeout(200)
