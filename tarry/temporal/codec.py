"""Optional payload encryption: AES-256-GCM with a key from `TARRY_ENCRYPTION_KEY`.

Prompts, transcripts, tool arguments and results all travel as Temporal payloads, so
without a codec the Temporal server stores them in plain text. With a key set, every
Tarry process encrypts payloads before they leave it and decrypts them on the way in;
the server, the `temporal` CLI and the Web UI see ciphertext unless they ask a codec
server that holds the key (`tarry-codec-server`).

Every process of a deployment (workers, CLI, dev stack) needs the same key: a payload
carries the id of the key that encrypted it, so a mismatch is a clear error.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

from tarry.config.settings import TarrySettings
from tarry.temporal.storage import external_storage

__all__ = [
    "ENCODING",
    "KEY_ID",
    "EncryptionCodec",
    "EncryptionKeyError",
    "data_converter",
    "new_key",
]

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
_NONCE_BYTES = 12
_KEY_BYTES = 32


def new_key() -> str:
    """A fresh random AES-256 key, base64-encoded: a value for `TARRY_ENCRYPTION_KEY`."""
    return base64.b64encode(os.urandom(_KEY_BYTES)).decode()


class EncryptionKeyError(ValueError):
    """`TARRY_ENCRYPTION_KEY` is not a usable key; the message says how to make one."""


def _parse_key(key: str) -> bytes:
    try:
        raw = base64.b64decode(key.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _KEY_BYTES:
        # Never echo the value: a near-miss of a real key is still a secret.
        raise EncryptionKeyError(
            f"TARRY_ENCRYPTION_KEY must be a base64-encoded {_KEY_BYTES}-byte key; make one with: "
            'python -c "from tarry.temporal.codec import new_key; print(new_key())"'
        )
    return raw


class EncryptionCodec(PayloadCodec):
    """Encrypts each payload whole (metadata and data) with AES-256-GCM.

    The encrypted payload keeps only two plain metadata entries: `encoding:
    binary/encrypted` and the key id, the first 8 hex digits of SHA-256 of the key,
    which names the key without revealing it. Payloads without that encoding decode
    unchanged, so histories written before encryption was turned on still read.
    """

    def __init__(self, key: str) -> None:
        raw = _parse_key(key)
        self._aes = AESGCM(raw)
        self.key_id = hashlib.sha256(raw).hexdigest()[:8]

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(p) if p.metadata.get("encoding") == ENCODING else p for p in payloads]

    def _encrypt(self, payload: Payload) -> Payload:
        # A random 96-bit nonce per payload: safe for about 2^32 payloads per key
        # (NIST SP 800-38D); a repeated nonce under one key breaks GCM entirely.
        nonce = os.urandom(_NONCE_BYTES)
        return Payload(
            metadata={"encoding": ENCODING, KEY_ID: self.key_id.encode()},
            data=nonce + self._aes.encrypt(nonce, payload.SerializeToString(), None),
        )

    def _decrypt(self, payload: Payload) -> Payload:
        key_id = payload.metadata.get(KEY_ID, b"").decode(errors="replace") or "(none)"
        if key_id != self.key_id:
            raise ValueError(
                f"payload was encrypted with key {key_id}, this process has {self.key_id}; "
                "set TARRY_ENCRYPTION_KEY to the key the runs were written with"
            )
        data = payload.data
        try:
            plain = self._aes.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], None)
        except (InvalidTag, ValueError):  # ValueError: too short to hold a nonce
            raise ValueError(
                f"payload encrypted with key {key_id} failed authentication: altered or damaged"
            ) from None
        return Payload.FromString(plain)


def data_converter(settings: TarrySettings) -> DataConverter:
    """The pydantic data converter, encrypting when `TARRY_ENCRYPTION_KEY` is set and
    keeping large payloads out of history (`tarry.temporal.storage`).

    The SDK encrypts before it stores, so the store holds only ciphertext too. Failure
    messages and stack traces stay plain (the SDK's default failure converter), so an
    operator without the key can still read why a task failed.
    """
    key = settings.tarry_encryption_key
    return dataclasses.replace(
        pydantic_data_converter,
        payload_codec=EncryptionCodec(key.get_secret_value()) if key else None,
        external_storage=external_storage(settings),
    )
