"""Checkpoints of a 1 GiB state through a real API server: what an incremental checkpoint uploads, how long
the program waits, and full-checkpoint MB/s against ``shutil.copyfile`` of the same bytes on the same disk.

Setup: a ``nodus apiserver`` (plain HTTP) on a scratch database with its filesystem blob store in the work
directory (``common.running_server``), one project, and, in this process, the agent's data layer as the
checkpoint protocol drives it: a :class:`~nodus.agent.snapshots.Mirror` of one root (``/nodus/state``, a
directory of ``size_mib / 64`` files of 64 MiB of ``os.urandom``) and a
:class:`~nodus.agent.checkpointstore.CheckpointStore` (4 uploads at a time, ``HEAD`` first while that finds
chunks). One checkpoint is ``stage`` (what the program waits for: walk and copy changed files into the
mirror), then ``manifest`` (hash what was copied) and ``upload`` (chunks the server lacks, then the
manifest), each timed.

* **Incremental.** After a full first checkpoint, 1 % of the state's bytes is rewritten in place, three
  ways, each followed by a checkpoint: (a) one contiguous region of one file; (b) four contiguous regions
  in four files; (c) for context, 256 regions of 1/25,600 of the state each, scattered over every file
  (the worst case of fixed-size 4 MiB chunks: most chunks change). Bytes uploaded are compared with the
  full checkpoint's; the target, for (a) and (b), is at most 5 %.
* **HEAD or not.** A store that lost what it knew (an agent restart) re-checkpoints the same state: with
  ``HEAD`` every chunk is found and none sent; without it every chunk is sent again (the server then
  deduplicates). And full checkpoints of fresh random bytes, in turn without ``HEAD``, with the store's
  default (``HEAD`` while it finds chunks) and with a ``HEAD`` before every chunk, for the cost of
  asking when nothing is there.
* **Throughput.** A full checkpoint of fresh random bytes (stage + manifest + upload), MB/s, against
  ``shutil.copyfile`` of the state's files to another directory of the same disk, in the same run. Files
  are freshly written, so every read comes from the page cache, for both; nothing is fsynced on the
  agent's side. The server fsyncs each blob, so the floor of its store is also measured: each 4 MiB
  piece of the state written to its own file and fsynced, one after another.
* **Restore.** The last full checkpoint restored by a fresh store into a fresh root (download, verify,
  write beside the root, swap, then seed a fresh mirror), MB/s.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import common

MIB = 1 << 20
FILE_MIB = 64
ROOT = "/nodus/state"
TARGET_FRACTION = 0.05
CREATED = "2025-01-01T00:00:00Z"


def _write_random(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        for _ in range(size // MIB):
            handle.write(os.urandom(MIB))


def _fill(state: Path, files: int) -> list[Path]:
    """``files`` files of fresh random bytes (rewritten, so every one changes identity)."""
    state.mkdir(parents=True, exist_ok=True)
    paths = [state / f"shard-{n:02d}.pt" for n in range(files)]
    for path in paths:
        _write_random(path, FILE_MIB * MIB)
    return paths


def _rewrite(regions: list[tuple[Path, int, int]]) -> None:
    """Overwrite each (file, offset, length) in place with random bytes."""
    for path, offset, length in regions:
        with path.open("r+b") as handle:
            handle.seek(offset)
            handle.write(os.urandom(length))


def _one_region(paths: list[Path], total: int, rng: random.Random) -> list[tuple[Path, int, int]]:
    length = total // 100
    return [(paths[0], rng.randrange(FILE_MIB * MIB - length), length)]


def _spread(paths: list[Path], total: int, rng: random.Random) -> list[tuple[Path, int, int]]:
    length = total // 100 // 4
    return [(path, rng.randrange(FILE_MIB * MIB - length), length) for path in rng.sample(paths, 4)]


def _scattered(paths: list[Path], total: int, rng: random.Random) -> list[tuple[Path, int, int]]:
    length = total // 100 // 256
    return [(rng.choice(paths), rng.randrange(FILE_MIB * MIB - length), length) for _ in range(256)]


async def _checkpoint(mirror: Any, store: Any, seq: int) -> dict[str, Any]:
    """One checkpoint, timed phase by phase."""
    started = time.perf_counter()
    staged = await asyncio.to_thread(mirror.stage, 1 << 40)
    staged_at = time.perf_counter()
    manifest = await asyncio.to_thread(mirror.manifest, staged, seq, "Snapshot", CREATED, {"job": "bench"})
    hashed_at = time.perf_counter()
    uploaded = await store.upload(manifest, mirror)
    done = time.perf_counter()
    return {
        "stage_s": staged_at - started,
        "manifest_s": hashed_at - staged_at,
        "upload_s": done - hashed_at,
        "total_s": done - started,
        "logical_bytes": manifest.size,
        "copied_bytes": staged.copied_bytes,
        "hashed_bytes": mirror.hashed,
        "uploaded_bytes": uploaded.uploaded_bytes,
        "chunk_bytes": uploaded.chunk_bytes,
        "chunks_uploaded": uploaded.chunks_uploaded,
        "chunks_present": uploaded.chunks_present,
        "chunks_total": uploaded.chunks_total,
        "mb_s": manifest.size / 1e6 / (done - started),
        "digest": uploaded.digest,
    }


def _disk(paths: list[Path], directory: Path) -> dict[str, float]:
    """Same disk, same bytes: ``shutil.copyfile`` of every state file into another directory; and, the
    floor of the server's blob store, each 4 MiB piece written to its own file and fsynced, one by one."""
    directory.mkdir(parents=True, exist_ok=True)
    size = sum(path.stat().st_size for path in paths)
    started = time.perf_counter()
    for path in paths:
        shutil.copyfile(path, directory / path.name)
    copy_s = time.perf_counter() - started
    shutil.rmtree(directory)
    directory.mkdir()
    started = time.perf_counter()
    for n, path in enumerate(paths):
        with path.open("rb") as source:
            while piece := source.read(4 * MIB):
                with (directory / f"{n}-{source.tell()}").open("wb") as target:
                    target.write(piece)
                    target.flush()
                    os.fsync(target.fileno())
    fsync_s = time.perf_counter() - started
    shutil.rmtree(directory)
    return {"copy_s": copy_s, "copy_mb_s": size / 1e6 / copy_s, "chunk_fsync_mb_s": size / 1e6 / fsync_s}


async def run(workdir: Path, size_mib: int = 1024, rounds: int = 1, concurrency: int = 4) -> dict[str, Any]:
    from nodus.agent import checkpointstore
    from nodus.agent.checkpointstore import CheckpointStore
    from nodus.agent.snapshots import Mirror
    from nodus.client import Client

    files = size_mib // FILE_MIB
    total = files * FILE_MIB * MIB
    rng = random.Random(20250101)
    state, mirror_dir = workdir / "attempt" / "state", workdir / "attempt" / "mirror"
    result: dict[str, Any] = {"size_mib": size_mib, "files": files, "file_mib": FILE_MIB, "concurrency": concurrency}
    async with (
        common.scratch_database(common.database_server_url()) as db,
        common.running_server(db, workdir / "apiserver") as server,
    ):
        result["postgres"] = await common.postgres_facts(db)
        await asyncio.to_thread(common.create_project, server)
        async with Client(common.client_config(server), user_agent="bench-checkpoints") as client:

            def store(probe: bool = True) -> Any:
                return CheckpointStore(client, common.PROJECT, concurrency=concurrency, probe=probe)

            # Warm-up: the server's upload path and the client's connections, on 16 MiB.
            await asyncio.to_thread(_write_random, workdir / "warm.bin", 16 * MIB)
            warm = Mirror(workdir / "warm-mirror", {ROOT: workdir / "warm.bin"})
            await _checkpoint(warm, store(), 1)

            paths = await asyncio.to_thread(_fill, state, files)
            mirror = Mirror(mirror_dir, {ROOT: state})
            attempt = store()
            server_cpu = common.cpu_seconds(server.pid)
            own_cpu = common.own_cpu_seconds()
            full = await _checkpoint(mirror, attempt, 1)
            full["server_cpu_s"] = common.cpu_seconds(server.pid) - server_cpu
            full["agent_cpu_s"] = common.own_cpu_seconds() - own_cpu
            result["full"] = full

            incremental: dict[str, Any] = {}
            layouts: dict[str, Callable[[list[Path], int, random.Random], list[tuple[Path, int, int]]]] = {
                "one_region": _one_region,
                "spread": _spread,
                "scattered": _scattered,
            }
            for seq, (name, layout) in enumerate(layouts.items(), start=2):
                regions = layout(paths, total, rng)
                await asyncio.to_thread(_rewrite, regions)
                entry = await _checkpoint(mirror, attempt, seq)
                entry["rewritten_bytes"] = sum(length for _, _, length in regions)
                entry["regions"] = len(regions)
                entry["fraction_of_full"] = entry["uploaded_bytes"] / full["uploaded_bytes"]
                incremental[name] = entry
            result["incremental"] = incremental
            result["target_fraction"] = TARGET_FRACTION
            result["met"] = all(incremental[n]["fraction_of_full"] <= TARGET_FRACTION for n in ("one_region", "spread"))

            # A store that lost what it knew, same state: HEAD finds every chunk, or every chunk is sent again.
            result["lost_known"] = {
                "probe": await _checkpoint(mirror, store(True), 10),
                "blind": await _checkpoint(mirror, store(False), 11),
            }

            # Full checkpoints of fresh random bytes, in turn: no HEAD, HEAD while it pays (the default),
            # and HEAD before every chunk (what the default avoids).
            fulls: dict[str, list[dict[str, Any]]] = {"blind": [], "probe": [], "every": []}
            seq = 20
            sample = checkpointstore.PROBE_SAMPLE
            for _ in range(rounds):
                for mode, runs in fulls.items():
                    await asyncio.to_thread(_fill, state, files)
                    seq += 1
                    checkpointstore.PROBE_SAMPLE = 1 << 30 if mode == "every" else sample
                    try:
                        runs.append(await _checkpoint(mirror, store(mode != "blind"), seq))
                    finally:
                        checkpointstore.PROBE_SAMPLE = sample
            result["fresh_full"] = fulls

            # The last checkpoint restored into a fresh root by a fresh store: download, verify, write, swap,
            # then the copy into the new mirror (seeding).
            fresh = workdir / "attempt" / "restored"
            started = time.perf_counter()
            await store().restore(fulls["every"][-1]["digest"], {ROOT: fresh}, Mirror(workdir / "m2", {ROOT: fresh}))
            result["restore"] = {"seconds": time.perf_counter() - started}
            result["restore"]["mb_s"] = total / 1e6 / result["restore"]["seconds"]
    result["disk"] = await asyncio.to_thread(_disk, paths, workdir / "copy")
    for scratch in ("attempt", "m2", "warm-mirror"):
        shutil.rmtree(workdir / scratch, ignore_errors=True)
    result.update(_summarise(result))
    return result


def _summarise(result: dict[str, Any]) -> dict[str, Any]:
    fulls = [result["full"], *result["fresh_full"]["probe"]]
    throughput = common.median([f["mb_s"] for f in fulls])
    upload = {mode: common.median([f["upload_s"] for f in runs]) for mode, runs in result["fresh_full"].items()}
    return {
        "throughput_mb_s": throughput,
        "throughput_vs_copy": throughput / result["disk"]["copy_mb_s"],
        "stage_full_s": result["full"]["stage_s"],
        "fresh_upload_s": {
            **upload,
            "probe_cost": upload["probe"] / upload["blind"] - 1,
            "every_cost": upload["every"] / upload["blind"] - 1,
        },
    }


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """The benchmark's lines of ``bench.run``'s table."""
    size, full = result["size_mib"], result["full"]
    table: list[tuple[str, str, str, str, str, str]] = []
    for name, label in (("one_region", "1 region"), ("spread", "4 regions"), ("scattered", "256 regions")):
        entry = result["incremental"][name]
        context = name == "scattered"
        table.append(
            (
                f"checkpoint after 1 % rewritten ({label}), MiB sent",
                f"{entry['uploaded_bytes'] / MIB:.1f} (stage {entry['stage_s']:.2f} s, "
                f"then {entry['total_s'] - entry['stage_s']:.2f} s)",
                f"full {full['uploaded_bytes'] / MIB:.0f}",
                f"{entry['fraction_of_full']:.3f}",
                "" if context else f"<= {TARGET_FRACTION:.2f}",
                "-" if context else ("met" if entry["fraction_of_full"] <= TARGET_FRACTION else "NOT met"),
            )
        )
    copy, floor = result["disk"]["copy_mb_s"], result["disk"]["chunk_fsync_mb_s"]
    table.append(
        (
            f"full checkpoint MB/s, {size} MiB (stage+hash+upload)",
            f"{result['throughput_mb_s']:.0f} (stage {full['stage_s']:.2f} s, hash {full['manifest_s']:.2f} s, "
            f"upload {full['upload_s']:.2f} s)",
            f"copyfile {copy:.0f}; 4 MiB+fsync {floor:.0f}",
            f"{result['throughput_vs_copy']:.3f}",
            "",
            "-",
        )
    )
    table.append(
        (
            f"  restore MB/s, {size} MiB (fresh root, mirror seeded)",
            f"{result['restore']['mb_s']:.0f} ({result['restore']['seconds']:.2f} s)",
            "",
            "",
            "",
            "-",
        )
    )
    lost, fresh = result["lost_known"], result["fresh_upload_s"]
    table.append(
        (
            "  HEAD: upload s after losing known; of new bytes",
            f"{lost['probe']['upload_s']:.2f} (HEAD) vs {lost['blind']['upload_s']:.2f} (resend)",
            f"new: {fresh['probe']:.2f} default, {fresh['every']:.2f} every, {fresh['blind']:.2f} none",
            f"{fresh['probe_cost']:+.3f} / {fresh['every_cost']:+.3f}",
            "",
            "-",
        )
    )
    return table
