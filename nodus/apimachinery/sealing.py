"""Sealing: values encrypted at rest with AES-256-GCM under keys from a key file (ADR-0013).

A key file holds one key per line, ``<key id> <base64 of 32 bytes>``; blank lines and lines starting
with ``#`` are ignored. The LAST key is the active one: it seals every new value. Every key in the file
still opens what it sealed, so rotation is appending a line (and restarting the API servers); a key is
removed only once nothing sealed under it is stored any more.

Each value is sealed with a fresh 96-bit random nonce and *associated data*: bytes that are not secret
and not stored with the ciphertext, but must be presented again to open it. Callers bind a value to
where it belongs (a Secret's uid, version and key name), so a ciphertext copied into another object or
another key fails to open instead of revealing its plaintext there.

Nothing here logs, and no exception message carries a value or a key.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

KEY_BYTES = 32
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9][-._A-Za-z0-9]{0,62}$")


def subkey(key: bytes, purpose: str) -> bytes:
    """HKDF-SHA256 of ``key`` with info ``nodus.dev/<purpose>`` (no salt: the input key is uniformly random)."""
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=f"nodus.dev/{purpose}".encode()).derive(
        key
    )


class KeyFileError(ValueError):
    """The key file is missing, malformed, or would be overwritten."""


class OpenError(Exception):
    """A sealed value did not open: unknown key id, tampered ciphertext or other associated data."""


@dataclass(frozen=True)
class Sealed:
    """One sealed value as stored: the key that sealed it, the nonce and the ciphertext (base64)."""

    key_id: str
    nonce_b64: str
    ciphertext_b64: str


class Keyring:
    """The keys of one process: the last one seals, all of them open."""

    def __init__(self, keys: list[tuple[str, bytes]]) -> None:
        if not keys:
            raise KeyFileError("a keyring needs at least one key")
        self._keys: dict[str, AESGCM] = {}
        self._raw: dict[str, bytes] = {}
        for key_id, key in keys:
            if key_id in self._keys:
                raise KeyFileError(f"key id {key_id!r} appears twice")
            if len(key) != KEY_BYTES:
                raise KeyFileError(f"key {key_id!r} is {len(key)} bytes; AES-256 keys are {KEY_BYTES}")
            self._keys[key_id] = AESGCM(key)
            self._raw[key_id] = key
        self.active_id = keys[-1][0]

    def derive(self, purpose: str) -> Keyring:
        """The keyring of one purpose: every key replaced by its HKDF-SHA256 subkey for ``purpose``, under the
        same ids (ADR 0035). Each use of the key file (Secret values, estimate ETags, node credentials) takes its
        own purpose, so that a value made for one can never be passed off as another."""
        return Keyring([(key_id, subkey(key, purpose)) for key_id, key in self._raw.items()])

    def raw_key(self, key_id: str) -> bytes | None:
        """The key with this id (for a MAC); None when the key file does not hold it."""
        return self._raw.get(key_id)

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(self._keys)

    @classmethod
    def load(cls, path: Path | str) -> Keyring:
        """Read a key file; :class:`KeyFileError` names the line at fault (never its key)."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise KeyFileError(f"cannot read the secret key file {path}: {exc.strerror}") from None
        keys: list[tuple[str, bytes]] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or not _KEY_ID.match(parts[0]):
                raise KeyFileError(f"{path}:{number}: expected '<key id> <base64 of {KEY_BYTES} bytes>'")
            try:
                key = base64.b64decode(parts[1], validate=True)
            except (binascii.Error, ValueError):
                raise KeyFileError(f"{path}:{number}: the key is not valid base64") from None
            if len(key) != KEY_BYTES:
                raise KeyFileError(f"{path}:{number}: the key is {len(key)} bytes; AES-256 keys are {KEY_BYTES}")
            keys.append((parts[0], key))
        if not keys:
            raise KeyFileError(f"{path} holds no key")
        return cls(keys)

    @classmethod
    def generate(cls, path: Path | str, key_id: str = "k1") -> Keyring:
        """Create a key file with one random key (mode 0600); refuses to overwrite an existing file."""
        path = Path(path)
        if not _KEY_ID.match(key_id):
            raise KeyFileError(f"invalid key id {key_id!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        key = secrets.token_bytes(KEY_BYTES)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise KeyFileError(f"{path} exists; refusing to overwrite a secret key file") from None
        with os.fdopen(fd, "w") as handle:
            handle.write(f"{key_id} {base64.b64encode(key).decode()}\n")
        return cls([(key_id, key)])

    def seal(self, plaintext: bytes, associated: bytes) -> Sealed:
        """Encrypt under the active key with a fresh nonce, bound to ``associated``."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        ciphertext = self._keys[self.active_id].encrypt(nonce, plaintext, associated)
        return Sealed(self.active_id, base64.b64encode(nonce).decode(), base64.b64encode(ciphertext).decode())

    def open(self, sealed: Sealed, associated: bytes) -> bytes:
        """Decrypt; :class:`OpenError` when the key is unknown or the value or ``associated`` differ."""
        cipher = self._keys.get(sealed.key_id)
        if cipher is None:
            raise OpenError(f"key {sealed.key_id!r} is not in the secret key file")
        try:
            nonce = base64.b64decode(sealed.nonce_b64, validate=True)
            ciphertext = base64.b64decode(sealed.ciphertext_b64, validate=True)
            return cipher.decrypt(nonce, ciphertext, associated)
        except (binascii.Error, ValueError, InvalidTag):
            raise OpenError(f"a value sealed with key {sealed.key_id!r} failed to open") from None
