"""A content-addressed store for payloads on the local filesystem.

Temporal rejects payloads over 2 MB and ends runs whose history passes 50 MB, so large
payloads live outside history: the SDK's `ExternalStorage` hands them to a
`StorageDriver` and keeps only a claim. This driver files each payload under the
SHA-256 of its bytes, so a payload stored twice takes space once and a claim always
names exactly the bytes it was made for. Every process of a deployment must see the
same directory; across machines, use the SDK's S3 driver instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

DRIVER_TYPE = "tarry.file"


class StoredPayloadMissing(LookupError):
    """A claim names a payload this store does not hold (or holds damaged)."""


class FileStorageDriver(StorageDriver):
    """Payloads as files named by their SHA-256, under `root/ab/abcdef...`."""

    def __init__(self, root: Path, driver_name: str = DRIVER_TYPE) -> None:
        self.root = root
        self._name = driver_name

    def name(self) -> str:
        return self._name

    def type(self) -> str:
        return DRIVER_TYPE

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        return await asyncio.to_thread(self._store_all, [p.SerializeToString() for p in payloads])

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return await asyncio.to_thread(self._retrieve_all, [c.claim_data["sha256"] for c in claims])

    def _path(self, digest: str) -> Path:
        return self.root / digest[:2] / digest

    def _store_all(self, blobs: list[bytes]) -> list[StorageDriverClaim]:
        claims = []
        for blob in blobs:
            digest = hashlib.sha256(blob).hexdigest()
            path = self._path(digest)
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                # Write then rename: a reader never sees half a payload, and two
                # writers of the same digest write the same bytes.
                fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
                with os.fdopen(fd, "wb") as f:
                    f.write(blob)
                os.replace(tmp, path)
            claims.append(StorageDriverClaim(claim_data={"sha256": digest}))
        return claims

    def _retrieve_all(self, digests: list[str]) -> list[Payload]:
        payloads = []
        for digest in digests:
            path = self._path(digest)
            try:
                blob = path.read_bytes()
            except FileNotFoundError:
                raise StoredPayloadMissing(
                    f"no stored payload {digest} under {self.root}; every worker and client "
                    "must share the storage directory (TARRY_STORAGE_DIR)"
                ) from None
            if hashlib.sha256(blob).hexdigest() != digest:
                raise StoredPayloadMissing(f"stored payload {path} is damaged")
            payloads.append(Payload.FromString(blob))
        return payloads
