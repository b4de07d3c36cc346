"""Downloads of an attempt's inputs: over HTTPS, or from S3 with a Signature V4 GET; digests checked.

Guarantees of :func:`download` and :func:`download_s3`:

* The body streams, :data:`CHUNK` at a time, into a temporary file next to the destination while its
  SHA-256 is computed. Only a complete body with the expected digest is renamed onto ``destination``
  (atomically, same directory): a failure or a digest mismatch leaves nothing there (an existing file
  at ``destination`` is left as it was) and no temporary file behind.
* Only TLS: ``https://`` URLs and ``https://`` redirects (at most :data:`MAX_REDIRECTS`). An S3
  endpoint may be ``http://`` only on the loopback host (``localhost``, ``127.0.0.1``, ``::1``), for
  a test server. ``ca_file`` adds no trust: it *replaces* the system CAs, for private endpoints.
* Only destinations ``policy`` allows (ADR 0032): every connection, each redirect hop's included,
  is made to an address resolved and checked by ``nodus.agent.dialing``; a refused one raises
  :class:`~nodus.apimachinery.destinations.Refused` (not a FetchError: retrying cannot help).
* Errors are :class:`FetchError` (a :class:`DigestMismatch` for a wrong digest) with messages that
  never carry credentials: URLs in messages lose their user info and query string (a presigned URL's
  signature lives there), and S3 keys are never printed.

Signature V4 (:func:`sign_v4`) is implemented here with ``hmac`` and ``hashlib``: path-style requests
(``{endpoint}/{bucket}/{key}``) with ``x-amz-content-sha256: UNSIGNED-PAYLOAD``, as S3 and every
S3-compatible store accept.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import hmac
import os
import re
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from nodus.agent import dialing
from nodus.apimachinery import destinations

CHUNK = 1 << 20
MAX_REDIRECTS = 10
TIMEOUT = httpx.Timeout(60.0, connect=20.0)
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
_S3_ERROR_FIELD = re.compile(r"<(Code|Message)>([^<]{0,500})</\1>")


class FetchError(Exception):
    """A download failed; the message is safe to show to the Job's owner."""


class DigestMismatch(FetchError):
    """The body's SHA-256 is not the expected one; nothing was written at the destination."""

    def __init__(self, expected: str, actual: str, url: str) -> None:
        super().__init__(f"sha256 of {url} is {actual}, expected {expected}")
        self.expected, self.actual, self.url = expected, actual, url


async def download(
    url: str,
    destination: Path,
    expected_sha256: str | None,
    *,
    policy: destinations.Policy,
    ca_file: str | None = None,
) -> str:
    """GET ``url`` (``https://`` only) into ``destination``; return the body's SHA-256 hex.

    ``expected_sha256`` is hex, upper or lower case, optionally prefixed ``sha256:``; when given, a
    body with another digest raises :class:`DigestMismatch`. Redirects are followed while they stay on
    ``https://`` and on destinations ``policy`` allows.
    """
    current = _require_https(url)
    async with dialing.http_client(policy, ca_file=ca_file, timeout=TIMEOUT) as http:
        for _ in range(MAX_REDIRECTS + 1):
            try:
                async with _get(http, current, {}) as response:
                    if response.is_redirect and "location" in response.headers:
                        current = _require_https(str(response.url.join(response.headers["location"])))
                        continue
                    if response.status_code != httpx.codes.OK:
                        raise FetchError(f"GET {redact(current)} answered {response.status_code}")
                    return await _save(response, destination, expected_sha256, redact(url))
            except destinations.Refused as exc:
                if current == url:
                    raise
                raise destinations.Refused(f"{redact(url)} redirects to {redact(current)}: {exc}", exc.fix) from None
    raise FetchError(f"GET {redact(url)}: more than {MAX_REDIRECTS} redirects")


async def download_s3(
    endpoint: str,
    region: str,
    bucket: str,
    key: str,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    destination: Path,
    expected_sha256: str | None,
    *,
    policy: destinations.Policy,
    ca_file: str | None = None,
) -> str:
    """GET object ``key`` of ``bucket`` from the S3 ``endpoint`` (``https://s3.us-east-1.amazonaws.com``)
    into ``destination``; return its SHA-256 hex. Same guarantees as :func:`download`; redirects are not
    followed (S3 redirects only for a wrong region, which the error then names)."""
    parts = urlsplit(endpoint)
    if parts.scheme != "https" and not (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS):
        raise FetchError(f"S3 endpoint {redact(endpoint)} must be https:// (http:// only for localhost)")
    if not bucket or not key:
        raise FetchError("an S3 object needs a bucket and a key")
    url = f"{endpoint.rstrip('/')}/{quote(bucket, safe='')}/{quote(key, safe='/~')}"
    name = f"s3://{bucket}/{key}"
    headers = sign_v4("GET", url, region, "s3", access_key, secret_key, session_token)
    async with (
        dialing.http_client(policy, ca_file=ca_file, timeout=TIMEOUT) as http,
        _get(http, url, headers) as response,
    ):
        if response.status_code != httpx.codes.OK:
            raise FetchError(
                f"GET {name} from {redact(endpoint)} answered {response.status_code}{await _s3_error(response)}"
            )
        return await _save(response, destination, expected_sha256, name)


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/path/to/key`` -> ``("bucket", "path/to/key")``; ValueError for anything else."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket or not key:
        raise ValueError(f"{uri!r} must name a bucket and a key: s3://bucket/key")
    return bucket, key


def sign_v4(
    method: str,
    url: str,
    region: str,
    service: str,
    access_key: str,
    secret_key: str,
    session_token: str | None = None,
    *,
    payload_sha256: str = UNSIGNED_PAYLOAD,
    now: datetime.datetime | None = None,
) -> dict[str, str]:
    """The headers that sign a request to ``url`` with AWS Signature Version 4 (header form).

    ``url``'s path must already be URI-encoded as it will be sent (S3 rules: every byte but
    ``A-Za-z0-9-._~`` and ``/``); the query, if any, is canonicalised here. Returns ``Host``,
    ``x-amz-date``, ``x-amz-content-sha256``, ``x-amz-security-token`` (with a session token) and
    ``Authorization``; send them all, unchanged.
    """
    when = (now or datetime.datetime.now(datetime.UTC)).astimezone(datetime.UTC)
    stamp, day = when.strftime("%Y%m%dT%H%M%SZ"), when.strftime("%Y%m%d")
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    headers = {"host": host, "x-amz-content-sha256": payload_sha256, "x-amz-date": stamp}
    if session_token:
        headers["x-amz-security-token"] = session_token
    signed = ";".join(sorted(headers))
    canonical_headers = "".join(f"{name}:{headers[name].strip()}\n" for name in sorted(headers))
    query = "&".join(
        sorted(
            f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}"
            for k, _, v in (pair.partition("=") for pair in parts.query.split("&") if pair)
        )
    )
    canonical = "\n".join([method, parts.path or "/", query, canonical_headers, signed, payload_sha256])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signing_key = f"AWS4{secret_key}".encode()
    for part in (day, region, service, "aws4_request"):
        signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    authorization = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return {
        "Host": host,
        "x-amz-date": stamp,
        "x-amz-content-sha256": payload_sha256,
        **({"x-amz-security-token": session_token} if session_token else {}),
        "Authorization": authorization,
    }


def redact(url: str) -> str:
    """``url`` fit for a message: without user info (``user:token@``) or query string."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, "…" if parts.query else "", ""))


def _require_https(url: str) -> str:
    if urlsplit(url).scheme != "https":
        raise FetchError(f"only https:// URLs are fetched, not {redact(url)}")
    return url


@contextlib.asynccontextmanager
async def _get(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> AsyncIterator[httpx.Response]:
    try:
        async with http.stream("GET", url, headers=headers, follow_redirects=False) as response:
            yield response
    except httpx.HTTPError as exc:
        raise FetchError(f"GET {redact(url)} failed: {type(exc).__name__}: {_safe(str(exc), url)}") from None


async def _save(response: httpx.Response, destination: Path, expected: str | None, name: str) -> str:
    wanted = expected.lower().removeprefix("sha256:") if expected else None
    digest = hashlib.sha256()
    fd, part = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as file:
            async for chunk in response.aiter_bytes(CHUNK):
                digest.update(chunk)
                await asyncio.to_thread(file.write, chunk)
            await asyncio.to_thread(_flush, file)
        actual = digest.hexdigest()
        if wanted is not None and actual != wanted:
            raise DigestMismatch(wanted, actual, name)
        os.replace(part, destination)
    except httpx.HTTPError as exc:
        os.unlink(part)
        raise FetchError(f"GET {name} failed while reading the body: {type(exc).__name__}") from None
    except BaseException:
        os.unlink(part)
        raise
    return actual


def _flush(file: IO[bytes]) -> None:
    file.flush()
    os.fsync(file.fileno())


async def _s3_error(response: httpx.Response) -> str:
    """S3's error code and message from an error body (read up to 64 KiB), as ``": Code: Message"``."""
    body = b""
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > 65536:
            break
    fields = dict(_S3_ERROR_FIELD.findall(body.decode("utf-8", "replace")))
    return ": " + ": ".join(fields[k] for k in ("Code", "Message") if k in fields) if fields else ""


def _safe(message: str, url: str) -> str:
    return message.replace(url, redact(url))
