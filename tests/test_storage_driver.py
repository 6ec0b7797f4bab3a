"""The filesystem storage driver: content-addressed, whole, and clear about what it lacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
)

from tarry.temporal.storage import FileStorageDriver, StoredPayloadMissing


async def test_a_stored_payload_comes_back_whole(tmp_path: Path) -> None:
    driver = FileStorageDriver(tmp_path)
    payload = Payload(metadata={"encoding": b"json/plain"}, data=b"x" * 300_000)
    [claim] = await driver.store(StorageDriverStoreContext(), [payload])
    assert await driver.retrieve(StorageDriverRetrieveContext(), [claim]) == [payload]


async def test_the_same_payload_is_stored_once(tmp_path: Path) -> None:
    driver = FileStorageDriver(tmp_path)
    payload = Payload(data=b"same")
    first, second = await driver.store(StorageDriverStoreContext(), [payload, payload])
    assert first == second
    assert len(_files(tmp_path)) == 1


async def test_a_missing_payload_names_the_directory_to_share(tmp_path: Path) -> None:
    claim = StorageDriverClaim(claim_data={"sha256": "ab" * 32})
    with pytest.raises(StoredPayloadMissing, match="TARRY_STORAGE_DIR"):
        await FileStorageDriver(tmp_path).retrieve(StorageDriverRetrieveContext(), [claim])


async def test_a_damaged_payload_is_refused(tmp_path: Path) -> None:
    driver = FileStorageDriver(tmp_path)
    [claim] = await driver.store(StorageDriverStoreContext(), [Payload(data=b"whole")])
    [stored] = _files(tmp_path)
    stored.write_bytes(b"altered")
    with pytest.raises(StoredPayloadMissing, match="damaged"):
        await driver.retrieve(StorageDriverRetrieveContext(), [claim])


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()]
