"""A content-addressed store for payloads on the local filesystem.

Temporal rejects payloads over 2 MB and ends runs whose history passes 50 MB, so large
payloads live outside history: the SDK's `ExternalStorage` hands them to a
`StorageDriver` and keeps only a claim. This driver files each payload under the
SHA-256 of its bytes, so a payload stored twice takes space once and a claim always
names exactly the bytes it was made for. Every process of a deployment must see the
same directory; across machines, use the SDK's S3 driver instead.

Whatever the driver, a payload it cannot store is an `ApplicationError` coded
`PAYLOAD_NOT_STORED` and not retryable: an activity whose result cannot be stored fails
at once with that code instead of re-running its side effects.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)
from temporalio.exceptions import ApplicationError

from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode

__all__ = [
    "DRIVER_TYPE",
    "MAX_PAYLOAD_BYTES",
    "TEMPORAL_BLOB_LIMIT",
    "FileStorageDriver",
    "StoredPayloadMissing",
    "external_storage",
    "load_model",
    "payload_limit",
    "storage_driver",
    "store_model",
]

M = TypeVar("M", bound=BaseModel)

DRIVER_TYPE = "tarry.file"
MAX_PAYLOAD_BYTES = 50 * 1024 * 1024
"""The largest payload the filesystem driver takes (the S3 driver's default too)."""
TEMPORAL_BLOB_LIMIT = 2 * 1024 * 1024
"""The largest payload Temporal takes in history (its default blob size limit)."""


class StoredPayloadMissing(LookupError):
    """A claim names a payload this store does not hold (or holds damaged)."""


class FileStorageDriver(StorageDriver):
    """Payloads as files named by their SHA-256, under `root/ab/abcdef...`."""

    def __init__(
        self,
        root: Path,
        driver_name: str = DRIVER_TYPE,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
    ) -> None:
        self.root = root
        self._name = driver_name
        self.max_payload_bytes = max_payload_bytes

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
            if len(blob) > self.max_payload_bytes:
                raise ValueError(
                    f"a payload of {len(blob)} bytes is over this store's limit of "
                    f"{self.max_payload_bytes} bytes"
                )
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


class _CodedStoreErrors(StorageDriver):
    """Any driver, with its store failures turned into `PAYLOAD_NOT_STORED`.

    An activity retried after its result failed to store would run its tool again,
    side effects and all, to fail the same way; a coded, non-retryable failure ends the
    attempt and tells the workflow why."""

    def __init__(self, driver: StorageDriver) -> None:
        self._driver = driver

    def name(self) -> str:
        return self._driver.name()

    def type(self) -> str:
        return self._driver.type()

    @property
    def max_payload_bytes(self) -> int:
        """The wrapped driver's limit: the file driver's, the SDK drivers' (private, 50 MiB
        by default)."""
        for name in ("max_payload_bytes", "_max_payload_size"):
            if isinstance(limit := getattr(self._driver, name, None), int):
                return limit
        return MAX_PAYLOAD_BYTES

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        try:
            return await self._driver.store(context, payloads)
        except Exception as e:
            raise ApplicationError(
                f"a payload could not be stored by {self.name()}: {e}",
                type=ErrorCode.PAYLOAD_NOT_STORED,
                non_retryable=True,
            ) from e

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        # Not coded: a payload missing here (a worker without the shared directory) may
        # be found by a retry on another worker, or once the share is mounted.
        return await self._driver.retrieve(context, claims)


def external_storage(settings: TarrySettings) -> ExternalStorage | None:
    """Where payloads over `TARRY_STORAGE_THRESHOLD` go: the settings' driver, else the
    filesystem under `TARRY_STORAGE_DIR`; None when `TARRY_STORAGE_ENABLED` is false."""
    if not settings.tarry_storage_enabled:
        return None
    return ExternalStorage(
        drivers=[_CodedStoreErrors(storage_driver(settings))],
        payload_size_threshold=settings.tarry_storage_threshold,
    )


def payload_limit(converter: DataConverter) -> int:
    """The largest payload `converter` can hand Temporal: its store's limit, or without
    a store Temporal's own. Pages of transcripts go to the store whatever their size, so
    its limit bounds them; other payloads under the storage threshold stay in history, so
    for a store that takes less than the threshold this is on the safe side.

    A run learns this with its tools (`Catalogue.payload_limit`): a workflow task whose
    completion holds a larger payload fails at every attempt, and the run with it."""
    storage = converter.external_storage
    if storage is None:
        return TEMPORAL_BLOB_LIMIT
    driver = storage.drivers[0]  # Tarry's converters have one
    return driver.max_payload_bytes if isinstance(driver, _CodedStoreErrors) else MAX_PAYLOAD_BYTES


def storage_driver(settings: TarrySettings) -> StorageDriver:
    """The settings' driver, else the filesystem under `TARRY_STORAGE_DIR`."""
    return settings.storage_driver or FileStorageDriver(settings.tarry_storage_dir)


async def store_model(
    driver: StorageDriver, converter: DataConverter, value: BaseModel
) -> dict[str, str]:
    """Stores `value` as one payload through `converter` (its codec too: a store holds
    only what Temporal would have seen encrypted); returns the driver's claim on it."""
    [payload] = converter.payload_converter.to_payloads([value])
    if converter.payload_codec:
        [payload] = await converter.payload_codec.encode([payload])
    [claim] = await driver.store(StorageDriverStoreContext(), [payload])
    return dict(claim.claim_data)


async def load_model(
    driver: StorageDriver, converter: DataConverter, claim: dict[str, str], type_: type[M]
) -> M:
    """The `type_` value `store_model` stored under `claim`; whatever the driver, the
    codec or the converter raise when it is missing or damaged."""
    [payload] = await driver.retrieve(
        StorageDriverRetrieveContext(), [StorageDriverClaim(claim_data=claim)]
    )
    if converter.payload_codec:
        [payload] = await converter.payload_codec.decode([payload])
    [value] = converter.payload_converter.from_payloads([payload], [type_])
    if not isinstance(value, type_):
        raise TypeError(f"stored payload is a {type(value).__name__}, not a {type_.__name__}")
    return value
