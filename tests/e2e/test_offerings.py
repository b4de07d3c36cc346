"""Offerings: the price book as objects every user can read, which only the price book writes."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from nodus.api import offerings
from nodus.cli import main
from nodus.storage import database
from tests.support import cluster as clusters
from tests.support import kubectl
from tests.support.cluster import Cluster
from tests.support.objects import API
from tests.support.watching import collect

pytestmark = pytest.mark.e2e

OFFERINGS = f"{API}/offerings"
DOCUMENTED = "h100-sxm-80g-x8-us"  # the example of docs/running-jobs.md
MERGE = {"Content-Type": "application/merge-patch+json"}
BOOK = offerings.load(None)
SHIPPED = resources.files("nodus.catalog").joinpath("pricebook.yaml").read_text(encoding="utf-8")

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kc(cluster: Cluster, kubectl_binary: Path) -> Callable[[str], Kubectl]:
    """kubectl as a given user: ``kc("dave")("get", "offerings")``."""

    def as_user(user: str) -> Kubectl:
        config = cluster.kubeconfig(user)

        def run(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
            return kubectl.run(kubectl_binary, config, *args, stdin=stdin, check=check)

        return run

    return as_user


def _rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines()[1:]}


def test_kubectl_get_offerings_shows_the_price_book(kc: Callable[[str], Kubectl]) -> None:
    dave = kc("dave")  # a user with no project at all
    out = dave("get", "offerings").stdout
    assert out.splitlines()[0].split() == [
        "NAME",
        "ACCELERATOR",
        "GPUS",
        "GPU-MEM",
        "VCPU",
        "MEMORY",
        "REGION",
        "SPOT",
        "$/HOUR",
        "BOOT-P50",
        "CAPACITY",
    ]
    rows = _rows(out)
    assert set(rows) == {offering.name for offering in BOOK.offerings}
    assert rows[DOCUMENTED] == [
        DOCUMENTED,
        "h100-sxm-80g",
        "8",
        "80Gi",
        "208",
        "1800Gi",
        "us-east",
        "false",
        "23.9200",  # a rate: four decimals, as every table shows one
        "90s",
        "<none>",
    ]
    cpu = "cpu-8c-eu-spot"
    assert rows[cpu] == [cpu, "<none>", "0", "<none>", "8", "32Gi", "eu-west", "true", "0.1524", "30s", "<none>"]
    wide = dave("get", "off", f"{DOCUMENTED}-spot", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[11:] == [
        "FAMILY",
        "INTERCONNECT",
        "DISK",
        "REGION-CLASS",
        "MTBI",
        "BOOT-P90",
        "PROVIDER",
        "PRICE-BOOK",
    ]
    spot = ["true", "11.9600", "90s", "<none>"]
    assert wide[1].split()[7:] == [*spot, "H100", "NVLink", "20Ti", "us", "6h", "4m", "sim", "2026-11"]
    explained = dave("explain", "offerings.spec.rateUSDPerHour").stdout
    assert "customer rate per host-hour" in explained


def test_api_resources_lists_offerings_as_cluster_scoped(kc: Callable[[str], Kubectl]) -> None:
    out = kc("carol")("api-resources", "--api-group=nodus.dev", "-o", "wide").stdout
    line = next(line for line in out.splitlines() if line.split()[0] == "offerings").split()
    assert line[1:4] == ["off", "nodus.dev/v1", "false"] and line[4] == "Offering"


async def test_any_user_may_list_get_and_watch(cluster: Cluster, project: str) -> None:
    for user in ("carol", "dave"):  # a Viewer of some project, and a user of none
        async with cluster.async_client(user) as client:
            listed = (await client.get(OFFERINGS)).json()
            assert listed["kind"] == "OfferingList"
            assert len(listed["items"]) == len(BOOK.offerings)
            got = await client.get(f"{OFFERINGS}/{DOCUMENTED}")
            assert got.status_code == 200, got.text
            assert got.json()["spec"] == BOOK.by_name()[DOCUMENTED].spec()
            assert got.json()["metadata"]["labels"] == {"nodus.dev/pricebook-version": "2026-11"}
            watched = await collect(client, OFFERINGS, 1, fieldSelector=f"metadata.name={DOCUMENTED}", timeoutSeconds=5)
            assert [(e["type"], e["object"]["metadata"]["name"]) for e in watched] == [("ADDED", DOCUMENTED)]
            missing = await client.get(f"{OFFERINGS}/tpu-v5-x8-us")
            assert missing.status_code == 404


def test_users_cannot_write_offerings(cluster: Cluster, admin: httpx.Client, project: str) -> None:
    current = admin.get(f"{OFFERINGS}/{DOCUMENTED}").json()
    new = {**BOOK.by_name()[DOCUMENTED].body(), "metadata": {"name": "my-cheap-h100"}}
    changed = {**current, "spec": {**current["spec"], "rateUSDPerHour": "0.010000"}}
    for user in ("alice", "carol", "dave"):  # an Owner, a Viewer and an outsider of the project
        with cluster.client(user) as client:
            attempts = {
                "create": client.post(OFFERINGS, json=new),
                "update": client.put(f"{OFFERINGS}/{DOCUMENTED}", json=changed),
                "patch": client.patch(
                    f"{OFFERINGS}/{DOCUMENTED}", json={"metadata": {"labels": {"a": "b"}}}, headers=MERGE
                ),
                "delete": client.delete(f"{OFFERINGS}/{DOCUMENTED}"),
                "deletecollection": client.delete(OFFERINGS),
            }
            for verb, response in attempts.items():
                assert response.status_code == 403, (user, verb, response.text)
                body = response.json()
                assert body["reason"] == "Forbidden"
                assert f'User "{user}" cannot {verb} resource "offerings"' in body["message"]
                assert body["message"].endswith(": offerings are read-only"), body["message"]
            status = client.put(f"{OFFERINGS}/{DOCUMENTED}/status", json={**current, "status": {"capacity": 1}})
            assert status.status_code == 403
    after = admin.get(f"{OFFERINGS}/{DOCUMENTED}").json()
    assert after["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]


def test_kubectl_tells_users_offerings_are_read_only(kc: Callable[[str], Kubectl]) -> None:
    carol = kc("carol")
    for args in (("delete", "offering", DOCUMENTED), ("label", "offering", DOCUMENTED, "mine=yes")):
        refused = carol(*args, check=False)
        assert refused.returncode != 0
        assert "Forbidden" in refused.stderr and "offerings are read-only" in refused.stderr, refused.stderr
    assert DOCUMENTED in carol("get", "offering", DOCUMENTED).stdout


def test_administrators_cannot_create_delete_or_respecify_offerings(admin: httpx.Client) -> None:
    current = admin.get(f"{OFFERINGS}/{DOCUMENTED}").json()
    created = admin.post(OFFERINGS, json={**BOOK.by_name()[DOCUMENTED].body(), "metadata": {"name": "extra"}})
    assert created.status_code == 405, created.text
    assert admin.delete(f"{OFFERINGS}/{DOCUMENTED}").status_code == 405
    respecified = admin.put(
        f"{OFFERINGS}/{DOCUMENTED}", json={**current, "spec": {**current["spec"], "rateUSDPerHour": "0.010000"}}
    )
    assert respecified.status_code == 422, respecified.text
    assert "price book" in respecified.text and respecified.json()["details"]["causes"][0]["field"] == "spec"
    assert admin.get(f"{OFFERINGS}/{DOCUMENTED}").json()["spec"] == current["spec"]


def test_the_provider_publishes_capacity_through_status(admin: httpx.Client, kc: Callable[[str], Kubectl]) -> None:
    name = "cpu-8c-asia"
    current = admin.get(f"{OFFERINGS}/{name}").json()
    try:
        written = admin.put(f"{OFFERINGS}/{name}/status", json={**current, "status": {"capacity": 3}})
        assert written.status_code == 200, written.text
        assert written.json()["spec"] == current["spec"]
        assert _rows(kc("dave")("get", "offerings", name).stdout)[name][-1] == "3"
        refused = admin.put(f"{OFFERINGS}/{name}/status", json={**written.json(), "status": {"capacity": -1}})
        assert refused.status_code == 422 and "status.capacity" in refused.text
    finally:
        latest = admin.get(f"{OFFERINGS}/{name}").json()
        latest.pop("status", None)
        admin.put(f"{OFFERINGS}/{name}/status", json=latest).raise_for_status()


def test_field_and_label_selectors(cluster: Cluster, kc: Callable[[str], Kubectl]) -> None:
    with cluster.client("dave") as dave:

        def names(**params: str) -> list[str]:
            response = dave.get(OFFERINGS, params=params)
            assert response.status_code == 200, response.text
            return [item["metadata"]["name"] for item in response.json()["items"]]

        assert names(fieldSelector=f"metadata.name={DOCUMENTED}") == [DOCUMENTED]
        assert len(names(fieldSelector=f"metadata.name!={DOCUMENTED}")) == len(BOOK.offerings) - 1
        assert len(names(labelSelector="nodus.dev/pricebook-version=2026-11")) == len(BOOK.offerings)
        assert names(labelSelector="nodus.dev/pricebook-version=2025-01") == []
        assert names(labelSelector="nodus.dev/pricebook-version in (2025-01,2026-11)", limit="5")[:1] == [
            sorted(o.name for o in BOOK.offerings)[0]
        ]
    out = kc("dave")(
        "get",
        "offerings",
        "-l",
        "nodus.dev/pricebook-version=2026-11",
        "--field-selector",
        f"metadata.name={DOCUMENTED}",
    ).stdout
    assert list(_rows(out)) == [DOCUMENTED]


# --- the price book at start ---------------------------------------------------------------------

EXTRA_CPU = '  - {vcpu: 4, memory: 16Gi, disk: 128Gi, rate: "0.2016", regions: [us], boot: {p50: 30s, p90: 90s}}\n'
RTX4090 = SHIPPED[SHIPPED.index("  - accelerator: rtx4090-24g") : SHIPPED.index("# CPU-only hosts")]


def _older_book() -> str:
    """An older book: another version, a cheaper 8x H100, no RTX 4090s and one CPU shape since dropped."""
    text = SHIPPED.replace('version: "2026-11"', 'version: "2026-08"').replace('8: "23.92"', '8: "21.60"')
    return text.replace(RTX4090, "").replace("cpuHosts:\n", "cpuHosts:\n" + EXTRA_CPU)


def _start(directory: Path, url: str, book: Path | None) -> Cluster:
    extra = ("--price-book", str(book)) if book else ()
    return clusters.start(directory, url, extra_args=extra, migrate=False)


def _stored(client: httpx.Client) -> tuple[str, dict[str, dict[str, Any]]]:
    listed = client.get(OFFERINGS).json()
    return listed["metadata"]["resourceVersion"], {o["metadata"]["name"]: o for o in listed["items"]}


async def test_the_api_server_makes_offerings_equal_to_its_price_book(database_server: str, tmp_path: Path) -> None:
    url = await database.create_database(database_server)
    try:
        await database.migrate_async(url)
        older = tmp_path / "older.yaml"
        older.write_text(_older_book())
        older_book = offerings.load(older)

        # Two servers starting at once with the same book agree on one set of offerings.
        first, second = await asyncio.gather(
            asyncio.to_thread(_start, tmp_path / "a", url, older),
            asyncio.to_thread(_start, tmp_path / "b", url, older),
        )
        try:
            with second.client("admin") as admin:
                _, stored = _stored(admin)
                assert set(stored) == {o.name for o in older_book.offerings}
                assert "cpu-4c-us" in stored and "rtx4090-24g-x1-us" not in stored
                for name, obj in stored.items():
                    assert obj["spec"] == older_book.by_name()[name].spec()
                    assert obj["metadata"]["labels"] == {"nodus.dev/pricebook-version": "2026-08"}
                held = stored[DOCUMENTED]
                assert held["spec"]["rateUSDPerHour"] == "21.600000"
                admin.put(
                    f"{OFFERINGS}/{DOCUMENTED}/status", json={**held, "status": {"capacity": 2}}
                ).raise_for_status()
        finally:
            first.stop()
            second.stop()

        # The shipped book replaces it: changed specs updated, missing created, dropped deleted, status kept.
        third = _start(tmp_path / "c", url, None)
        try:
            with third.client("admin") as admin:
                version, stored = _stored(admin)
                assert set(stored) == {o.name for o in BOOK.offerings}
                assert all(obj["spec"] == BOOK.by_name()[name].spec() for name, obj in stored.items())
                assert {obj["metadata"]["labels"]["nodus.dev/pricebook-version"] for obj in stored.values()} == {
                    "2026-11"
                }
                updated = stored[DOCUMENTED]
                assert updated["spec"]["rateUSDPerHour"] == "23.920000"
                assert updated["status"] == {"capacity": 2}
                assert updated["metadata"]["uid"] == held["metadata"]["uid"]
                assert updated["metadata"]["generation"] == 2
        finally:
            third.stop()

        # Starting again with the same book writes nothing.
        fourth = _start(tmp_path / "d", url, None)
        try:
            with fourth.client("admin") as admin:
                assert _stored(admin)[0] == version
        finally:
            fourth.stop()
    finally:
        await database.drop_database(url)


async def test_a_bad_price_book_stops_the_server_naming_the_problem(database_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(SHIPPED.replace('8: "23.92"', "8: 23.92"))
    with pytest.raises(RuntimeError) as caught:
        await asyncio.to_thread(_start, tmp_path / "bad", database_url, bad)
    assert f"price book {bad} is invalid" in str(caught.value)
    assert "gpuHosts[2] (h100-sxm-80g).sizes.8: must be a quoted decimal string" in str(caught.value)


def test_both_server_commands_take_a_price_book() -> None:
    for command in ("apiserver", "dev"):
        assert main.parser().parse_args([command, "--price-book", "book.yaml"]).price_book == Path("book.yaml")
        assert main.parser().parse_args([command]).price_book is None  # the shipped book
