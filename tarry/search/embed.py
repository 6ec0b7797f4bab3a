"""The `embed` model task: texts into vectors by the embedding profile's OpenAI-compatible
`POST /embeddings` (OpenAI's, llama.cpp's server's, the scripted model's), in batches,
with the tokens it used and their estimated cost. A worker embeds messages in the index
activity (its retries and timeouts are the activity's); the API and the command line
embed a query where the search happens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tarry.config.tables import EmbeddingProfile
from tarry.contracts import Usage

__all__ = ["Embedder", "EmbeddingFailed", "Embeddings"]


class EmbeddingFailed(RuntimeError):
    """The embedding model did not answer with a vector for each text."""


@dataclass(frozen=True)
class Embeddings:
    vectors: list[list[float]]
    """One per text, in order."""
    usage: Usage


class Embedder:
    """Embeds with `profile` over `http` (a pool of the caller's; one of its own, closed
    by `aclose`, unless given)."""

    def __init__(self, profile: EmbeddingProfile, http: httpx.AsyncClient | None = None) -> None:
        self.profile = profile
        self._own_http = http is None
        self._http = http or httpx.AsyncClient()

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        """The vectors of `texts`, `profile.batch` to a request; `EmbeddingFailed`, or
        httpx's error, when the model cannot be asked or answers otherwise."""
        profile = self.profile
        vectors: list[list[float]] = []
        usage = Usage()
        for start in range(0, len(texts), profile.batch):
            batch = [t[: profile.max_characters] for t in texts[start : start + profile.batch]]
            answer = await self._ask(batch)
            data = sorted(answer.get("data") or [], key=lambda d: int(d.get("index", 0)))
            if len(data) != len(batch):
                raise EmbeddingFailed(
                    f"the embedding model {profile.model} at {profile.base_url}"
                    f" answered {len(data)} vectors for {len(batch)} texts"
                )
            vectors += [[float(v) for v in d["embedding"]] for d in data]
            tokens = int((answer.get("usage") or {}).get("prompt_tokens") or 0)
            cost = tokens * profile.price / 1_000_000
            usage += Usage(prompt_tokens=tokens, total_tokens=tokens, cost_usd=cost)
        return Embeddings(vectors, usage)

    async def _ask(self, texts: list[str]) -> dict[str, Any]:
        profile = self.profile
        body: dict[str, Any] = {"model": profile.model, "input": texts}
        if profile.dimensions is not None:
            body["dimensions"] = profile.dimensions
        key = profile.api_key
        headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}
        url = f"{profile.base_url.rstrip('/')}/embeddings"
        response = await self._http.post(
            url, json=body, headers=headers, timeout=profile.request_timeout
        )
        if response.is_error:
            raise EmbeddingFailed(
                f"the embedding model {profile.model} at {url} answered"
                f" {response.status_code}: {response.text[:300]}; check [embedding] (or"
                " TARRY_EMBEDDING): its base_url, model and api_key"
            )
        answer: dict[str, Any] = response.json()
        return answer

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()
