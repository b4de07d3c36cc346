"""The web console's authentication through a real API server (ADR 0053): the login page, token and one-time
code logins, the session cookie on the ordinary API, CSRF, logout, expiry, login codes and who may mint them,
the access summary, and the console's static files, each with the hostile inputs a browser or an attacker
could send (other origins, open redirects, reflected markup, path traversal in every spelling)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import asyncpg
import httpx
import pytest

from nodus.apimachinery.sealing import Keyring
from nodus.cli import kubeconfig
from nodus.storage import database
from tests.conftest import make_project
from tests.support import cluster as clusters
from tests.support.cluster import Cluster
from tests.support.objects import API

pytestmark = pytest.mark.e2e
MERGE = {"Content-Type": "application/merge-patch+json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)


@pytest.fixture(scope="module")
def cluster(database_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """This module's own API server with a secret key file (it issues node credentials, whose holders must not
    mint login codes), on its own database (the tests move sessions' expiry there)."""
    url = asyncio.run(database.create_database(database_server))
    database.migrate(url)
    directory = tmp_path_factory.mktemp("console")
    Keyring.generate(directory / "secret-keys")
    running = clusters.start(directory, url, extra_args=("--secret-key-file", str(directory / "secret-keys")))
    try:
        yield running
    finally:
        running.stop()
        asyncio.run(database.drop_database(url))


@pytest.fixture
def project(cluster: Cluster) -> str:
    with cluster.client() as admin:
        return make_project(
            admin,
            [
                {"name": "alice", "role": "Owner"},
                {"name": "bob", "role": "Editor"},
                {"name": "carol", "role": "Viewer"},
            ],
            credit=None,
        )


def browser(cluster: Cluster) -> httpx.Client:
    """A client with no credentials that follows no redirects (it keeps the cookies it is given)."""
    return httpx.Client(base_url=cluster.url, verify=cluster.tls(), timeout=30)


def origin(cluster: Cluster) -> str:
    return cluster.url


def session_cookie(response: httpx.Response) -> SimpleCookie:
    [header] = [v for k, v in response.headers.multi_items() if k == "set-cookie" and v.startswith("nodus-session=")]
    cookie = SimpleCookie()
    cookie.load(header)
    return cookie


def log_in(cluster: Cluster, user: str) -> str:
    """The session cookie value after logging ``user`` in with their token through the form."""
    with browser(cluster) as client:
        response = client.post(
            "/console/login",
            content=f"token={cluster.tokens[user]}",
            headers={**FORM, "Origin": origin(cluster)},
        )
    assert response.status_code == 303, response.text
    return session_cookie(response)["nodus-session"].value


def with_session(cluster: Cluster, cookie: str, csrf: str | None = None) -> httpx.Client:
    headers = {"Cookie": f"nodus-session={cookie}"}
    if csrf is not None:
        headers["X-CSRF-Token"] = csrf
    return httpx.Client(base_url=cluster.url, verify=cluster.tls(), timeout=30, headers=headers)


def csrf_of(cluster: Cluster, cookie: str) -> str:
    with with_session(cluster, cookie) as client:
        response = client.get("/console/api/session")
    assert response.status_code == 200, response.text
    return str(response.json()["csrfToken"])


def login_code_url(cluster: Cluster, user: str = "admin") -> str:
    with cluster.client(user) as client:
        response = client.post("/console/api/logincodes")
    assert response.status_code == 201, response.text
    return str(response.json()["url"])


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.path}?{parts.query}"


def assert_console_headers(response: httpx.Response) -> None:
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert response.headers["x-frame-options"] == "DENY"


def assets_prefix(cluster: Cluster) -> str:
    with browser(cluster) as client:
        page = client.get("/console/login").text
    match = re.search(r'href="(/console/assets/[0-9a-f]{12})/login\.css"', page)
    assert match is not None, page
    return match.group(1)


# --- the login page and logging in ----------------------------------------------------------------


def test_the_login_page_is_an_accessible_form_with_the_security_headers(cluster: Cluster) -> None:
    with browser(cluster) as client:
        page = client.get("/console/login")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert_console_headers(page)
        html = page.text
        assert '<html lang="en">' in html and "<title>" in html and "<main" in html
        assert '<label for="token">' in html
        assert re.search(r'<input id="token" name="token" type="password" autocomplete="off"', html)
        assert "<script" not in html and "style=" not in html
        css = client.get(f"{assets_prefix(cluster)}/login.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert css.headers["cache-control"] == "public, max-age=31536000, immutable"
    assert_console_headers(css)


def test_a_token_login_sets_a_strict_cookie_and_the_console_answers_it(cluster: Cluster) -> None:
    with browser(cluster) as client:
        response = client.post(
            "/console/login", content=f"token={cluster.tokens['alice']}", headers={**FORM, "Origin": origin(cluster)}
        )
        assert response.status_code == 303 and response.headers["location"] == "/console/"
        assert_console_headers(response)
        morsel = session_cookie(response)["nodus-session"]
        assert morsel["httponly"] and morsel["secure"] and morsel["samesite"].lower() == "strict"
        assert morsel["path"] == "/" and morsel["max-age"] == "43200"
        # 32 random bytes, URL-safe: nothing of the token in it.
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", morsel.value) and cluster.tokens["alice"] not in morsel.value
    with browser(cluster) as anonymous:
        refused = anonymous.get("/console/")
        assert refused.status_code == 303 and refused.headers["location"] == "/console/login"
    with with_session(cluster, morsel.value) as alice:
        described = alice.get("/console/api/session")
        assert described.status_code == 200
        body = described.json()
        assert body["user"] == "alice" and body["groups"] == ["developers", "system:authenticated"]
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", body["csrfToken"])
        page = alice.get("/console/")
        assert page.status_code == 200 and page.headers["cache-control"] == "no-cache"
        assert "{{ASSETS}}" not in page.text and assets_prefix(cluster) in page.text
        assert_console_headers(page)
        # The cookie is a credential for the ordinary API too.
        assert alice.get(f"{API}/projects").status_code == 200


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Origin": "https://evil.example"}, id="another-site"),
        pytest.param({"Origin": "https://127.0.0.1.evil.example"}, id="lookalike-host"),
        pytest.param({"Origin": "null"}, id="sandboxed-frame"),
        pytest.param({}, id="no-origin-no-referer"),
        pytest.param({"Referer": "https://evil.example/console/login"}, id="foreign-referer"),
        pytest.param({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, id="null-origin-cross-site"),
    ],
)
def test_a_login_from_another_origin_is_refused(cluster: Cluster, headers: dict[str, str]) -> None:
    with browser(cluster) as client:
        response = client.post(
            "/console/login", content=f"token={cluster.tokens['admin']}", headers={**FORM, **headers}
        )
    assert response.status_code == 403
    assert "set-cookie" not in response.headers
    assert "login page" in response.text


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({"Referer": "{url}/console/login"}, id="same-origin-referer"),
        # The login page sets no-referrer on its response, so browsers send Origin: null with the form; they
        # also send Sec-Fetch-Site, which no page can forge.
        pytest.param({"Origin": "null", "Sec-Fetch-Site": "same-origin"}, id="browser-same-origin"),
    ],
)
def test_a_login_from_this_origin_without_an_origin_header_is_accepted(
    cluster: Cluster, headers: dict[str, str]
) -> None:
    sent = {k: v.format(url=cluster.url) for k, v in headers.items()}
    with browser(cluster) as client:
        response = client.post("/console/login", content=f"token={cluster.tokens['bob']}", headers={**FORM, **sent})
    assert response.status_code == 303, response.text


def test_bad_tokens_and_machine_credentials_do_not_log_in(cluster: Cluster, project: str) -> None:
    node_token, bootstrap_token = machine_tokens(cluster, project)
    same = {**FORM, "Origin": origin(cluster)}
    with browser(cluster) as client:
        wrong = client.post("/console/login", content="token=not-a-token", headers=same)
        assert wrong.status_code == 401 and "not valid" in wrong.text and "set-cookie" not in wrong.headers
        empty = client.post("/console/login", content="token=", headers=same)
        assert empty.status_code == 401 and "set-cookie" not in empty.headers
        for token in (node_token, bootstrap_token):
            refused = client.post("/console/login", content=f"token={token}", headers=same)
            assert refused.status_code == 403 and "set-cookie" not in refused.headers
            assert "machines, not people" in refused.text
        not_a_form = client.post(
            "/console/login", json={"token": cluster.tokens["admin"]}, headers={"Origin": origin(cluster)}
        )
        assert not_a_form.status_code == 400 and "set-cookie" not in not_a_form.headers


def machine_tokens(cluster: Cluster, project: str) -> tuple[str, str]:
    """A node credential and a (separate, unspent) bootstrap token of a pool in ``project``."""
    pool = f"{API}/namespaces/{project}/pools/lab"
    with cluster.client("alice") as alice:
        made = alice.post(
            f"{API}/namespaces/{project}/pools",
            json={"apiVersion": "nodus.dev/v1", "kind": "Pool", "metadata": {"name": "lab"}, "spec": {}},
        )
        assert made.status_code == 201, made.text
        tokens = [alice.post(f"{pool}/jointokens").json()["status"]["token"] for _ in range(2)]
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "NodeCredentialRequest",
        "spec": {"nodeName": f"host-{uuid.uuid4().hex[:8]}"},
    }
    with browser(cluster) as client:
        exchanged = client.post(f"{API}/nodecredentials", json=body, headers={"Authorization": f"Bearer {tokens[0]}"})
    assert exchanged.status_code == 201, exchanged.text
    return str(exchanged.json()["status"]["token"]), str(tokens[1])


# --- one-time login codes ---------------------------------------------------------------------------


def test_a_login_code_logs_in_once_as_whoever_asked_for_it(cluster: Cluster) -> None:
    with cluster.client("carol") as carol:
        minted = carol.post("/console/api/logincodes")
    assert minted.status_code == 201
    url = minted.json()["url"]
    assert url.startswith(f"{cluster.url}/console/login?code=")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", minted.json()["expiresAt"])
    [code] = parse_qs(urlsplit(url).query)["code"]
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", code)
    with browser(cluster) as client:
        first = client.get(path_of(url))
        assert first.status_code == 303 and first.headers["location"] == "/console/#/projects/default/jobs"
        cookie = session_cookie(first)["nodus-session"].value
        again = client.get(path_of(url))
        assert again.status_code == 401 and "set-cookie" not in again.headers
        assert "nodus console" in again.text
        unknown = client.get("/console/login?code=" + "A" * 43)
        assert unknown.status_code == 401 and "set-cookie" not in unknown.headers
    with with_session(cluster, cookie) as session:
        assert session.get("/console/api/session").json()["user"] == "carol"


async def test_two_concurrent_redeems_of_one_code_log_in_once(cluster: Cluster) -> None:
    for _ in range(5):
        path = path_of(login_code_url(cluster))
        async with (
            httpx.AsyncClient(base_url=cluster.url, verify=cluster.tls(), timeout=30) as one,
            httpx.AsyncClient(base_url=cluster.url, verify=cluster.tls(), timeout=30) as two,
        ):
            answers = await asyncio.gather(one.get(path), two.get(path))
        assert sorted(a.status_code for a in answers) == [303, 401]


def test_only_a_credential_that_is_not_a_session_mints_login_codes(cluster: Cluster, project: str) -> None:
    node_token, bootstrap_token = machine_tokens(cluster, project)
    with browser(cluster) as client:
        for token in (node_token, bootstrap_token):
            refused = client.post("/console/api/logincodes", headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 403, refused.text
            assert "machines, not people" in refused.json()["message"]
        assert client.post("/console/api/logincodes").status_code == 401
    cookie = log_in(cluster, "admin")
    with with_session(cluster, cookie, csrf_of(cluster, cookie)) as session:
        from_session = session.post("/console/api/logincodes")
    assert from_session.status_code == 403 and "nodus console" in from_session.json()["fix"]


def nodus(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run(
        [sys.executable, "-m", "nodus", *args], capture_output=True, text=True, timeout=60, check=False, env=env
    )


def test_nodus_console_prints_a_link_that_logs_the_kubeconfigs_user_in(cluster: Cluster) -> None:
    printed = nodus("console", "--kubeconfig", str(cluster.kubeconfig("bob")))
    assert printed.returncode == 0, printed.stderr
    [url] = printed.stdout.splitlines()
    assert url.startswith(f"{cluster.url}/console/login?code=") and "works once" in printed.stderr
    with browser(cluster) as client:
        landed = client.get(path_of(url))
        assert landed.status_code == 303
        assert client.get("/console/api/session").json()["user"] == "bob"


def test_nodus_console_says_what_is_wrong(cluster: Cluster, tmp_path: Path) -> None:
    missing = nodus("console")
    assert missing.returncode != 0 and "--kubeconfig" in missing.stderr
    unreadable = nodus("console", "--kubeconfig", str(tmp_path / "nowhere"))
    assert unreadable.returncode != 0 and "cannot read the kubeconfig" in unreadable.stderr
    wrong_token = tmp_path / "wrong-token"
    kubeconfig.write(wrong_token, cluster.url, cluster.ca_file, "not-a-token")
    refused = nodus("console", "--kubeconfig", str(wrong_token))
    assert refused.returncode != 0 and "401 Unauthorized" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    down = tmp_path / "down"
    kubeconfig.write(down, f"https://127.0.0.1:{clusters.free_port()}", cluster.ca_file, cluster.tokens["bob"])
    unreachable = nodus("console", "--kubeconfig", str(down))
    assert unreachable.returncode != 0 and "cannot reach the API server" in unreachable.stderr


@contextlib.contextmanager
def nodus_dev(data_dir: Path, port: int, database_url: str) -> Iterator[str]:
    """``nodus dev`` (no image registry) running until the block ends: the Console link it printed."""
    env = {k: v for k, v in os.environ.items() if k not in ("NODUS_DATABASE_URL", "KUBECONFIG")}
    args = ["dev", "--data-dir", str(data_dir), "--port", str(port), "--database-url", database_url]
    process = subprocess.Popen(
        [sys.executable, "-m", "nodus", *args, "--registry-port", "0", "--sim-runtime", "unsandboxed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    try:
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Console: ") or len(lines) > 50:
                break
        assert len(lines) >= 2 and lines[-1].startswith("Console: "), "".join(lines)
        assert "export KUBECONFIG=" in lines[-2]
        yield lines[-1].removeprefix("Console: ").strip()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        finally:
            process.stdout.close()


def test_nodus_dev_prints_a_new_console_link_at_each_start(database_server: str, tmp_path: Path) -> None:
    url = asyncio.run(database.create_database(database_server))
    port = clusters.free_port()
    data_dir = tmp_path / "dev"
    try:
        with nodus_dev(data_dir, port, url) as first:
            assert first.startswith(f"https://127.0.0.1:{port}/console/login?code=")
            ca = ssl.create_default_context(cafile=str(data_dir / "pki" / "ca.crt"))
            with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=ca, timeout=30) as client:
                landed = client.get(path_of(first))
                assert landed.status_code == 303 and landed.headers["location"] == "/console/#/projects/default/jobs"
                assert client.get("/console/api/session").json()["user"] == "admin"
                assert client.get(path_of(first)).status_code == 401
        with nodus_dev(data_dir, port, url) as second:
            assert second.startswith(f"https://127.0.0.1:{port}/console/login?code=") and second != first
    finally:
        asyncio.run(database.drop_database(url))


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "https://evil.example/console/",
        "/\\evil.example/",
        "/console/\\\\evil.example",
        "/console//evil.example",
        "/console/%2e%2e/%2e%2e/evil",
        "/console/../../evil",
        "/consolex/",
        "/console/\r\nSet-Cookie: x=1",
        '/console/"><script>alert(1)</script>',
        "javascript:alert(1)",
    ],
)
def test_next_never_leaves_the_console(cluster: Cluster, target: str) -> None:
    url = login_code_url(cluster)
    with browser(cluster) as client:
        response = client.get(path_of(url) + "&" + urlencode({"next": target}))
        assert response.status_code == 303
        assert response.headers["location"] == "/console/#/projects/default/jobs"
        form = client.get("/console/login", params={"next": target})
        posted = client.post(
            "/console/login",
            data={"token": cluster.tokens["admin"], "next": target},
            headers={"Origin": origin(cluster)},
        )
    assert posted.status_code == 303 and posted.headers["location"] == "/console/"
    assert form.status_code == 200 and 'name="next"' not in form.text and "<script>" not in form.text


def test_a_next_under_the_console_is_followed_and_escaped_on_the_page(cluster: Cluster) -> None:
    target = "/console/?a=1&b='x'#/projects/p/jobs"
    with browser(cluster) as client:
        form = client.get("/console/login", params={"next": target})
        assert 'value="/console/?a=1&amp;b=&#x27;x&#x27;#/projects/p/jobs"' in form.text
        response = client.get(path_of(login_code_url(cluster)) + "&" + urlencode({"next": target}))
        assert response.status_code == 303 and response.headers["location"] == target


def test_the_login_page_reflects_nothing_unescaped(cluster: Cluster) -> None:
    markup = "<img src=x onerror=alert(1)>"
    with browser(cluster) as client:
        for response in (
            client.get("/console/login", params={"code": markup, "next": markup}),
            client.get("/console/login", params={"code": "x" * 5000}),
            client.post("/console/login", data={"token": markup, "next": markup}, headers={"Origin": origin(cluster)}),
        ):
            assert response.status_code == 401
            assert "<img" not in response.text
            assert_console_headers(response)


# --- the cookie on the API: CSRF, logout, expiry -------------------------------------------------------


def test_cookie_authenticated_writes_need_the_csrf_token_and_change_nothing_without_it(
    cluster: Cluster, project: str
) -> None:
    alice = log_in(cluster, "alice")
    admin = log_in(cluster, "admin")
    patch = {"spec": {"displayName": "renamed"}}
    other = f"p-{uuid.uuid4().hex[:8]}"
    new_project = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": other}, "spec": {}}
    for csrf in (None, "wrong", ""):
        with with_session(cluster, alice, csrf) as session:
            refused = session.patch(f"{API}/projects/{project}", json=patch, headers=MERGE)
            assert refused.status_code == 403, refused.text
            assert "X-CSRF-Token" in refused.json()["message"] and "/console/api/session" in refused.json()["fix"]
        with with_session(cluster, admin, csrf) as session:
            assert session.post(f"{API}/projects", json=new_project).status_code == 403
            assert session.delete(f"{API}/projects/{project}").status_code == 403
            assert session.post("/console/logout").status_code == 403
    with cluster.client() as bearer:
        unchanged = bearer.get(f"{API}/projects/{project}").json()
        assert unchanged["spec"]["displayName"] == project and "deletionTimestamp" not in unchanged["metadata"]
        assert bearer.get(f"{API}/projects/{other}").status_code == 404
    with with_session(cluster, alice, csrf_of(cluster, alice)) as session:
        # Reads need no token; a write with the session's own token goes through.
        assert session.get(f"{API}/projects/{project}").status_code == 200
        patched = session.patch(f"{API}/projects/{project}", json=patch, headers=MERGE)
        assert patched.status_code == 200 and patched.json()["spec"]["displayName"] == "renamed"
    with cluster.client("alice") as bearer:
        # A bearer token needs no CSRF token (and a browser cannot send one on its own).
        again = bearer.patch(f"{API}/projects/{project}", json={"spec": {"displayName": "bearer"}}, headers=MERGE)
        assert again.status_code == 200


def test_logout_ends_the_session_on_the_server(cluster: Cluster) -> None:
    cookie = log_in(cluster, "bob")
    csrf = csrf_of(cluster, cookie)
    with with_session(cluster, cookie, csrf) as session:
        out = session.post("/console/logout")
        assert out.status_code == 204
        cleared = session_cookie(out)["nodus-session"]
        assert cleared.value == "" and cleared["max-age"] == "0"
        # The browser would drop the cookie; someone who kept a copy gets nothing from it.
        after = session.get("/console/api/session")
        assert after.status_code == 401 and "/console/login" in after.json()["fix"]
        assert session.get(f"{API}/projects").status_code == 401
        assert session.get("/console/").status_code == 303
        assert session.post("/console/logout").status_code == 401


def test_an_expired_session_is_refused(cluster: Cluster) -> None:
    cookie = log_in(cluster, "alice")
    with with_session(cluster, cookie) as session:
        assert session.get("/console/api/session").status_code == 200

    async def expire() -> None:
        # As the clock would, twelve hours on: the row (keyed by the cookie's hash) is past its expiry.
        conn = await asyncpg.connect(database.asyncpg_dsn(cluster.database_url))
        try:
            moved = await conn.execute(
                "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE id_hash = $1",
                hashlib.sha256(cookie.encode()).hexdigest(),
            )
        finally:
            await conn.close()
        assert moved == "UPDATE 1"

    asyncio.run(expire())
    with with_session(cluster, cookie) as session:
        assert session.get("/console/api/session").status_code == 401
        assert session.get(f"{API}/projects").status_code == 401
        redirected = session.get("/console/")
        assert redirected.status_code == 303 and redirected.headers["location"] == "/console/login"


def test_the_session_endpoint_answers_the_cookie_only(cluster: Cluster) -> None:
    with cluster.client() as bearer:
        response = bearer.get("/console/api/session")
    assert response.status_code == 401
    assert_console_headers(response)


def test_hostile_cookies_authenticate_nobody_and_a_bearer_token_still_does(cluster: Cluster) -> None:
    for cookie in ("garbage", "A" * 43, "x" * 10_000, "", '"quoted"', "a;b"):
        with browser(cluster) as client:
            response = client.get(f"{API}/projects", headers={"Cookie": f"nodus-session={cookie}"})
            assert response.status_code == 401, cookie
            bearer = {"Cookie": f"nodus-session={cookie}", "Authorization": f"Bearer {cluster.tokens['carol']}"}
            assert client.get(f"{API}/projects", headers=bearer).status_code == 200
    real = log_in(cluster, "carol")
    with browser(cluster) as client:
        # Two cookies of the name: the last one counts, and a wrong one never authenticates as anybody.
        last = client.get("/console/api/session", headers={"Cookie": f"nodus-session=garbage; nodus-session={real}"})
        assert last.status_code == 200 and last.json()["user"] == "carol"
        first = client.get("/console/api/session", headers={"Cookie": f"nodus-session={real}; nodus-session=garbage"})
        assert first.status_code == 401


def test_hostile_login_bodies_are_refused_without_a_session(cluster: Cluster) -> None:
    same = {"Origin": origin(cluster)}
    with browser(cluster) as client:
        too_large = client.post("/console/login", content=b"token=" + b"a" * 20_000, headers={**FORM, **same})
        assert too_large.status_code == 413
        not_utf8 = client.post("/console/login", content=b"token=\xff\xfe", headers={**FORM, **same})
        assert not_utf8.status_code == 400
        many = "&".join(f"f{i}=x" for i in range(50))
        too_many = client.post("/console/login", content=many, headers={**FORM, **same})
        assert too_many.status_code == 400
        for response in (too_large, not_utf8, too_many):
            assert "set-cookie" not in response.headers
            assert_console_headers(response)


@pytest.mark.parametrize(
    ("host", "status"),
    [
        pytest.param("nodus.example:8443", 201, id="a-name-and-port"),
        pytest.param("[::1]:8443", 201, id="ipv6"),
        pytest.param("evil.example/phish?x=", 400, id="a-path"),
        pytest.param("user@evil.example", 400, id="userinfo"),
        pytest.param("evil.example\\x", 400, id="backslash"),
    ],
)
def test_a_login_link_names_the_host_the_caller_used_or_is_refused(cluster: Cluster, host: str, status: int) -> None:
    with cluster.client("alice") as alice:
        response = alice.post("/console/api/logincodes", headers={"Host": host})
    assert response.status_code == status, response.text
    if status == 201:
        assert response.json()["url"].startswith(f"https://{host}/console/login?code=")


# --- the access summary ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("alice", {"jobs/create": True, "jobs/update": True, "jobs/delete": True, "projects/update": True}),
        ("bob", {"jobs/create": True, "jobs/update": True, "jobs/delete": True, "projects/update": False}),
        ("carol", {"jobs/create": False, "jobs/update": False, "jobs/delete": False, "projects/update": False}),
        ("admin", {"jobs/create": True, "jobs/update": True, "jobs/delete": True, "projects/update": True}),
    ],
)
def test_the_access_summary_is_the_authorizers_answer(
    cluster: Cluster, project: str, user: str, expected: dict[str, bool]
) -> None:
    with cluster.client(user) as bearer:
        response = bearer.get("/console/api/access", params={"project": project})
    assert response.status_code == 200, response.text
    assert response.json() == {"project": project, "user": user, "allowed": expected}
    with with_session(cluster, log_in(cluster, user)) as session:
        assert session.get("/console/api/access", params={"project": project}).json()["allowed"] == expected


def test_the_access_summary_hides_projects_the_caller_cannot_read(cluster: Cluster, project: str) -> None:
    with cluster.client("dave") as dave:
        assert dave.get("/console/api/access", params={"project": project}).status_code == 403
        assert dave.get("/console/api/access", params={"project": "no-such-project"}).status_code == 403
        assert dave.get("/console/api/access").status_code == 400
    with cluster.client() as admin:
        assert admin.get("/console/api/access", params={"project": "no-such-project"}).status_code == 404
    with browser(cluster) as anonymous:
        assert anonymous.get("/console/api/access", params={"project": project}).status_code == 401


# --- static files ------------------------------------------------------------------------------------


def raw_get(cluster: Cluster, target: str) -> tuple[int, bytes]:
    """GET ``target`` exactly as written (no client normalises it): the status and the whole response."""
    parts = urlsplit(cluster.url)
    assert parts.hostname is not None and parts.port is not None
    request = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n".encode("latin-1")
    chunks = []
    with (
        socket.create_connection((parts.hostname, parts.port), timeout=30) as plain,
        cluster.tls().wrap_socket(plain, server_hostname=parts.hostname) as tls,
    ):
        tls.sendall(request)
        while True:
            try:
                chunk = tls.recv(65536)
            except ssl.SSLError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    response = b"".join(chunks)
    status = int(response.split(b" ", 2)[1]) if response else 0
    return status, response


@pytest.mark.parametrize(
    "path",
    [
        "../../api/server.py",
        "../__init__.py",
        "%2e%2e/%2e%2e/api/server.py",
        "%2E%2E%2F%2E%2E%2Fapi%2Fserver.py",
        "..%2f..%2fapi%2fserver.py",
        "/etc/passwd",
        "%2fetc%2fpasswd",
        "login.css%00",
        "login.css%00.js",
        "..\\..\\api\\server.py",
        "..%5c..%5capi%5cserver.py",
        "./login.css",
        "vendor/../../api/server.py",
        "",
    ],
)
def test_asset_paths_outside_the_build_are_404(cluster: Cluster, path: str) -> None:
    prefix = assets_prefix(cluster)
    status, response = raw_get(cluster, f"{prefix}/{path}")
    assert status == 404, response[:300]
    assert b"import " not in response and b"root:" not in response
    assert b"content-security-policy: default-src 'self'" in response.lower()
    # The same client reads a file of the build: the refusals above are about the paths.
    assert raw_get(cluster, f"{prefix}/login.css")[0] == 200


def test_assets_are_versioned(cluster: Cluster) -> None:
    prefix = assets_prefix(cluster)
    with browser(cluster) as client:
        assert client.get(f"{prefix}/login.css").status_code == 200
        assert client.get("/console/assets/000000000000/login.css").status_code == 404
        assert client.head(f"{prefix}/login.css").status_code == 200


# --- in a real browser --------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Headless Chromium (Debian's package) driven by Playwright; skipped with the fix when either is missing."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/install-system-packages lists it)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def attacker_page(context: Any, body: str) -> Any:
    """A page of https://evil.example (served by the browser's own routing) holding ``body``."""
    page = context.new_page()
    page.route(
        "https://evil.example/",
        lambda route: route.fulfill(status=200, content_type="text/html", body=f"<!doctype html>{body}"),
    )
    return page


def test_a_person_logs_in_with_the_form_and_the_cookie_is_out_of_scripts_reach(cluster: Cluster, chromium: Any) -> None:
    context = chromium.new_context(ignore_https_errors=True)
    try:
        page = context.new_page()
        page.goto(f"{cluster.url}/console/")
        assert page.url == f"{cluster.url}/console/login"
        page.fill("#token", cluster.tokens["alice"])
        page.click("button[type=submit]")
        page.wait_for_url(f"{cluster.url}/console/")
        [cookie] = [c for c in context.cookies() if c["name"] == "nodus-session"]
        assert cookie["httpOnly"] and cookie["secure"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
        assert "nodus-session" not in page.evaluate("document.cookie")
        described = page.evaluate("fetch('/console/api/session').then(r => r.json())")
        assert described["user"] == "alice"
    finally:
        context.close()


def test_another_site_can_neither_log_a_browser_in_nor_act_with_its_session(cluster: Cluster, chromium: Any) -> None:
    context = chromium.new_context(ignore_https_errors=True)
    try:
        evil = attacker_page(
            context,
            f'<form method="post" action="{cluster.url}/console/login"><input name="token" '
            f'value="{cluster.tokens["admin"]}"></form><script>document.forms[0].submit()</script>',
        )
        evil.goto("https://evil.example/")
        evil.wait_for_url(f"{cluster.url}/console/login")
        assert "was not sent from this console" in evil.content()
        assert [c for c in context.cookies() if c["name"] == "nodus-session"] == []

        # Logged in for real, the same browser visits the attacker again, whose form tries to end the session.
        page = context.new_page()
        page.goto(f"{cluster.url}/console/login")
        page.fill("#token", cluster.tokens["alice"])
        page.click("button[type=submit]")
        page.wait_for_url(f"{cluster.url}/console/")
        evil = attacker_page(
            context,
            f'<form method="post" action="{cluster.url}/console/logout"></form>'
            "<script>document.forms[0].submit()</script>",
        )
        evil.goto("https://evil.example/")
        evil.wait_for_url(f"{cluster.url}/console/logout")
        # SameSite=Strict kept the cookie off the attacker's request, and it carried no CSRF token either.
        assert page.evaluate("fetch('/console/api/session').then(r => r.status)") == 200
    finally:
        context.close()


def test_a_login_link_followed_from_another_site_lands_logged_in(cluster: Cluster, chromium: Any) -> None:
    """A browser keeps a SameSite=Strict cookie off every request of a navigation another site started, the 303
    included; the link's answer then is a page of this origin that moves on by itself, with the cookie."""
    link = login_code_url(cluster, "carol")
    context = chromium.new_context(ignore_https_errors=True)
    try:
        chat = attacker_page(context, f'<a id="link" href="{link}">open the console</a>')
        chat.goto("https://evil.example/")
        chat.click("#link")
        chat.wait_for_url(f"{cluster.url}/console/#/projects/default/jobs")
        assert chat.evaluate("fetch('/console/api/session').then(r => r.json())")["user"] == "carol"
    finally:
        context.close()


def test_a_login_link_from_another_site_answers_with_a_page_that_moves_on(cluster: Cluster) -> None:
    with browser(cluster) as client:
        response = client.get(path_of(login_code_url(cluster)), headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 200 and response.headers["cache-control"] == "no-store"
    assert session_cookie(response)["nodus-session"]["samesite"].lower() == "strict"
    assert '<meta http-equiv="refresh" content="0; url=/console/#/projects/default/jobs">' in response.text
    assert "<script" not in response.text
    assert_console_headers(response)
