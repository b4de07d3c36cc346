"""A lean HTTP/1.1 load generator, run as its own process so that client CPU stays out of the server's.

Keep-alive connections on plain asyncio streams (uvloop), requests built as bytes before the clock
starts, responses read by Content-Length or chunked framing without being parsed. A worker reads
its spec (JSON) on stdin and prints its result (JSON) on stdout::

    {"endpoint": {"host", "port", "token", "ca_file"}, "method": "POST", "path": "...",
     "template": {...} | null, "prefix": "c0-", "warmup": 200, "count": 3000, "connections": 32,
     "expect": 201}

A POST sends ``template`` with ``metadata.name`` set to ``prefix`` plus the request's index (the
warm-up requests are named ``prefix`` + ``w`` + index); a GET sends no body.
"""

from __future__ import annotations

import asyncio
import ssl
import sys
import time
from collections import Counter
from typing import Any

import orjson

from bench import common


def build_request(method: str, path: str, host: str, token: str, body: bytes | None = None) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        f"Authorization: Bearer {token}",
        "Accept: application/json",
        "User-Agent: nodus-bench/1",
    ]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One response on a keep-alive connection: its status and body (de-chunked)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lowered = head.lower()
    index = lowered.find(b"\r\ncontent-length:")
    if index >= 0:
        end = lowered.index(b"\r\n", index + 2)
        length = int(lowered[index + 17 : end])
        return status, await reader.readexactly(length)
    if b"transfer-encoding: chunked" not in lowered:
        raise RuntimeError(f"response without a length: {head[:200]!r}")
    parts: list[bytes] = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers are sent
            return status, b"".join(parts)
        chunk = await reader.readexactly(size + 2)
        parts.append(chunk[:-2])


async def open_connection(endpoint: dict[str, Any]) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    context: ssl.SSLContext | None = None
    if endpoint.get("ca_file"):
        context = ssl.create_default_context(cafile=endpoint["ca_file"])
    return await asyncio.open_connection(endpoint["host"], endpoint["port"], ssl=context, limit=1 << 22)


def _requests(spec: dict[str, Any], names: list[str]) -> list[bytes]:
    endpoint, method, path = spec["endpoint"], spec["method"], spec["path"]
    host = f"{endpoint['host']}:{endpoint['port']}"
    template = spec.get("template")
    if template is None:
        one = build_request(method, path, host, endpoint["token"])
        return [one] * len(names)
    built = []
    for name in names:
        template["metadata"]["name"] = name
        built.append(build_request(method, path, host, endpoint["token"], orjson.dumps(template)))
    return built


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    count, connections = int(spec["count"]), int(spec["connections"])
    prefix, expect = spec.get("prefix", ""), int(spec.get("expect", 200))
    warmup = _requests(spec, [f"{prefix}w{i}" for i in range(int(spec.get("warmup", 0)))])
    measured = _requests(spec, [f"{prefix}{i}" for i in range(count)])
    links = [await open_connection(spec["endpoint"]) for _ in range(min(connections, max(count, 1)))]
    statuses: Counter[int] = Counter()
    latencies: list[float] = []
    sizes: list[int] = []
    first_body: list[bytes] = []
    odd_body: list[bytes] = []

    async def drive(requests: list[bytes], record: bool) -> None:
        position = 0

        async def one_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal position
            while position < len(requests):
                request = requests[position]
                position += 1
                started = time.perf_counter()
                writer.write(request)
                status, body = await read_response(reader)
                if record:
                    latencies.append(time.perf_counter() - started)
                    sizes.append(len(body))
                    statuses[status] += 1
                    if not first_body:
                        first_body.append(body)
                    if status != expect and not odd_body:
                        odd_body.append(body)

        await asyncio.gather(*(one_connection(reader, writer) for reader, writer in links))

    await drive(warmup, record=False)
    with common.CpuMeter(spec.get("server_pid")) as cpu:
        started = time.perf_counter()
        await drive(measured, record=True)
        elapsed = time.perf_counter() - started
    for _, writer in links:
        writer.close()
    result: dict[str, Any] = {
        "count": count,
        "elapsed": elapsed,
        "throughput": count / elapsed if elapsed else 0.0,
        "latency_p50": common.percentile(latencies, 50),
        "latency_p99": common.percentile(latencies, 99),
        "latencies": latencies if spec.get("return_latencies") else None,
        "bytes": sum(sizes),
        "statuses": {str(k): v for k, v in statuses.items()},
        "unexpected": sum(v for k, v in statuses.items() if k != expect),
        "cpu": cpu.summary(),
    }
    if spec.get("count_items") and first_body:
        result["items"] = len(orjson.loads(first_body[0])["items"])
    if odd_body:
        result["sample"] = odd_body[0][:500].decode(errors="replace")
    return result


def main() -> None:
    import uvloop

    common.raise_nofile()
    spec = common.read_spec()
    common.write_result(spec, uvloop.run(run(spec)))


if __name__ == "__main__" and "--worker" in sys.argv:
    main()
