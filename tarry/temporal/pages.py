"""Pages of a run's transcript in the payload store.

A long run keeps in its memory only the messages its next model call needs; it moves
the older ones into immutable pages in the store that holds its large payloads and
keeps the pages' references (`TranscriptPageRef`), and the references of its oldest
pages in immutable indexes (`TranscriptPageIndexRef`), each naming the one before. The
page activities write both (`activities/pages.py`); the client reads them back, so
`RunHandle.transcript` still answers the whole conversation. Pages are encoded with the
deployment's codec, as every payload Temporal sees: a store holds only ciphertext when
payloads are encrypted.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TypeVar, overload

from pydantic import BaseModel
from temporalio.converter import DataConverter, StorageDriver

from tarry.contracts import (
    ChatMessage,
    StoredPageIndex,
    TranscriptPageIndexRef,
    TranscriptPageRef,
)
from tarry.temporal.storage import load_model, store_model

__all__ = ["PageMissing", "PageStore"]

M = TypeVar("M", bound=BaseModel)


class _Page(BaseModel):
    messages: list[ChatMessage]


class PageMissing(LookupError):
    """The store lacks a page, or holds it damaged (the client's `PAYLOAD_MISSING`)."""


class PageStore:
    """Writes and reads transcript pages through a storage driver and a data converter
    (the worker's, or a client's: the same settings make the same pair)."""

    _CACHED_INDEXES = 64
    """Indexes kept once read: a reader walks the chain from the newest at every read of
    old messages, and an index never changes."""

    def __init__(self, driver: StorageDriver, converter: DataConverter) -> None:
        self._driver = driver
        self._converter = converter
        self._indexes: OrderedDict[str, StoredPageIndex] = OrderedDict()

    @overload
    @classmethod
    def of(cls, converter: DataConverter, driver: StorageDriver) -> PageStore: ...
    @overload
    @classmethod
    def of(cls, converter: DataConverter, driver: None = None) -> PageStore | None: ...
    @classmethod
    def of(cls, converter: DataConverter, driver: StorageDriver | None = None) -> PageStore | None:
        """The pages in the store of `converter`'s large payloads (its external storage,
        as `tarry.temporal.codec.data_converter` builds it), else in `driver`; None without
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
        what = f"the transcript page of messages {ref.start}-{ref.end - 1}"
        page = await self._load(ref.claim, _Page, what)
        if len(page.messages) != ref.count:
            raise PageMissing(
                f"the transcript page of messages {ref.start}-{ref.end - 1} holds "
                f"{len(page.messages)} messages, not {ref.count}"
            )
        return page.messages

    async def write_index(self, index: StoredPageIndex) -> TranscriptPageIndexRef:
        """Stores `index`; its reference names the messages up to its last page's end."""
        claim = await store_model(self._driver, self._converter, index)
        return TranscriptPageIndexRef(claim=claim, end=index.pages[-1].end)

    async def pages_from(
        self, index: TranscriptPageIndexRef, start: int
    ) -> list[TranscriptPageRef]:
        """The references of the pages `index` and the indexes before it name that hold
        messages from `start` on, oldest first."""
        found: list[TranscriptPageRef] = []
        ref: TranscriptPageIndexRef | None = index
        while ref is not None:
            stored = await self._index(ref)
            found[:0] = [page for page in stored.pages if page.end > start]
            if stored.pages[0].start <= start:
                break
            ref = stored.previous
        return found

    async def _index(self, ref: TranscriptPageIndexRef) -> StoredPageIndex:
        key = str(sorted(ref.claim.items()))
        if (cached := self._indexes.get(key)) is not None:
            self._indexes.move_to_end(key)
            return cached
        what = f"the index of the transcript pages before message {ref.end}"
        index = await self._load(ref.claim, StoredPageIndex, what)
        self._indexes[key] = index
        if len(self._indexes) > self._CACHED_INDEXES:
            self._indexes.popitem(last=False)
        return index

    async def _load(self, claim: dict[str, str], type_: type[M], what: str) -> M:
        """The `type_` stored under `claim`; `PageMissing` naming `what` otherwise."""
        try:
            return await load_model(self._driver, self._converter, claim, type_)
        except Exception as e:
            raise PageMissing(
                f"{what} cannot be read from the payload store ({type(e).__name__}: {e}); a "
                "client must use the workers' store (TARRY_STORAGE_DIR, or the same S3 bucket)"
            ) from None
