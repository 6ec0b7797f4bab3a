"""The response cache: a model call identical to one answered before is answered again
from the payload store, at no cost (`ModelProfile.cache`, opt-in per profile).

Identical means the same provider, endpoint and model, the same messages as sent (after
the context budget's cut), tools, sampling and output schema: their SHA-256 is the key.
The answers live in the payload store, encoded with the deployment's codec like every
payload (encrypted where payloads are); each worker keeps the index of keys to stored
answers in memory, per profile, bounded by `cache_entries` (the least recently used goes
first) and `cache_ttl`. A worker that starts again starts with an empty index; what the
store holds of it stays there, as every payload does. A run marked sensitive, or under a
`pii` guardrail, neither reads nor writes it (`LlmRequest.private`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel
from temporalio.converter import DataConverter, StorageDriver

from activities.provider import ModelCall
from tarry.contracts import ChatMessage, LlmResponse, Usage
from tarry.temporal.storage import StoredPayloadMissing, load_model, store_model


class _Answer(BaseModel):
    """What the cache keeps of an answer: what the model said, not what it cost."""

    message: ChatMessage
    finish_reason: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class _Entry:
    claim: dict[str, str]
    stored_at: float


def key_of(call: ModelCall) -> str:
    """The SHA-256 of everything that shapes the answer."""
    profile = call.profile
    shaped = {
        "provider": profile.provider,
        "base_url": profile.base_url,
        "model": profile.model,
        "system": call.system,
        "messages": [m.for_model() for m in call.messages],
        "tools": [t.model_dump(mode="json") for t in call.tools],
        "sampling": call.sampling.model_dump(mode="json", exclude_none=True),
        "output_schema": call.output_schema,
    }
    text = json.dumps(shaped, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class ResponseCache:
    """The worker's index of cached answers, per profile, over the payload store."""

    def __init__(
        self,
        driver: StorageDriver,
        converter: DataConverter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._driver = driver
        self._converter = converter
        self._clock = clock
        self._index: dict[str, OrderedDict[str, _Entry]] = {}

    async def get(self, name: str, call: ModelCall) -> LlmResponse | None:
        """The answer cached for `call` of profile `name`, marked cached and free; None
        when there is none younger than the profile's `cache_ttl`."""
        index = self._index.setdefault(name, OrderedDict())
        key = key_of(call)
        entry = index.get(key)
        if entry is None:
            return None
        if self._clock() - entry.stored_at > call.profile.cache_ttl:
            del index[key]
            return None
        try:
            kept = await load_model(self._driver, self._converter, entry.claim, _Answer)
        except StoredPayloadMissing:
            del index[key]
            return None
        index.move_to_end(key)
        message = kept.message.model_copy(update={"cached": True})
        return LlmResponse(
            message=message,
            usage=Usage(cached_calls=1),
            finish_reason=kept.finish_reason,
            model=kept.model,
            cached=True,
        )

    async def put(self, name: str, call: ModelCall, answer: LlmResponse) -> None:
        """Keeps `answer` to `call`, dropping the least recently used past `cache_entries`."""
        kept = _Answer(
            message=answer.message, finish_reason=answer.finish_reason, model=answer.model
        )
        claim = await store_model(self._driver, self._converter, kept)
        index = self._index.setdefault(name, OrderedDict())
        index[key_of(call)] = _Entry(claim, self._clock())
        index.move_to_end(key_of(call))
        while len(index) > call.profile.cache_entries:
            index.popitem(last=False)
