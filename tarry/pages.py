"""Pages of a run's transcript in the payload store.

A long run keeps in its memory only the messages its next model call needs; at each
continue-as-new it moves the older ones into an immutable page in the store that holds
its large payloads and keeps the page's reference (`TranscriptPageRef`). The page
activity writes pages (`activities/pages.py`); the client reads them back, so
`RunHandle.transcript` still answers the whole conversation. Pages are encoded with the
deployment's codec, as every payload Temporal sees: a store holds only ciphertext when
payloads are encrypted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from pydantic import BaseModel
from temporalio.converter import DataConverter, StorageDriver

from tarry.contracts import ChatMessage, TranscriptPageRef
from tarry.storage import load_model, store_model

__all__ = ["PageMissing", "PageStore"]


class _Page(BaseModel):
    messages: list[ChatMessage]


class PageMissing(LookupError):
    """The store lacks a page, or holds it damaged (the client's `PAYLOAD_MISSING`)."""


class PageStore:
    """Writes and reads transcript pages through a storage driver and a data converter
    (the worker's, or a client's: the same settings make the same pair)."""

    def __init__(self, driver: StorageDriver, converter: DataConverter) -> None:
        self._driver = driver
        self._converter = converter

    @overload
    @classmethod
    def of(cls, converter: DataConverter, driver: StorageDriver) -> PageStore: ...
    @overload
    @classmethod
    def of(cls, converter: DataConverter, driver: None = None) -> PageStore | None: ...
    @classmethod
    def of(cls, converter: DataConverter, driver: StorageDriver | None = None) -> PageStore | None:
        """The pages in the store of `converter`'s large payloads (its external storage,
        as `tarry.codec.data_converter` builds it), else in `driver`; None without
        either. Workers and clients built from the same settings find the same store."""
        storage = converter.external_storage
        if storage is not None:
            driver = storage.drivers[0]  # Tarry's converters have one
        return cls(driver, converter) if driver is not None else None

    async def write(self, start: int, messages: Sequence[ChatMessage]) -> TranscriptPageRef:
        """Stores `messages`, the transcript's from index `start` on, as one page."""
        claim = await store_model(self._driver, self._converter, _Page(messages=list(messages)))
        return TranscriptPageRef(claim=claim, start=start, count=len(messages))

    async def read(self, ref: TranscriptPageRef) -> list[ChatMessage]:
        """The messages of the page `ref` names; `PageMissing` when it cannot be read."""
        try:
            page = await load_model(self._driver, self._converter, ref.claim, _Page)
        except Exception as e:
            raise PageMissing(
                f"the transcript page of messages {ref.start}-{ref.end - 1} cannot be read "
                f"from the payload store ({type(e).__name__}: {e}); a client must use the "
                "workers' store (TARRY_STORAGE_DIR, or the same S3 bucket)"
            ) from None
        if len(page.messages) != ref.count:
            raise PageMissing(
                f"the transcript page of messages {ref.start}-{ref.end - 1} holds "
                f"{len(page.messages)} messages, not {ref.count}"
            )
        return page.messages
