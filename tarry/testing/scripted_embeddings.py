"""The scripted model's embeddings endpoint (`POST /v1/embeddings`, OpenAI's shape), for
semantic search in `tarry dev`, the tours and tests: a text's vector is its words hashed
into `EMBEDDING_DIMENSIONS` buckets (each word and each pair of neighbours), scaled to
length 1. No model reads anything: the same text always gets the same vector, and texts
that share words are nearer than texts that share none."""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from typing import Any

from aiohttp import web

__all__ = ["EMBEDDING_DIMENSIONS", "embedding_of", "embeddings_handler"]

EMBEDDING_DIMENSIONS = 256
_WORD = re.compile(r"\w+")


def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    """The bucket a feature adds to and its sign (a signed hash keeps collisions from
    only ever adding up)."""
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    value = int.from_bytes(digest, "big")
    return value % dimensions, 1.0 if value >> 63 else -1.0


def embedding_of(text: str, dimensions: int = EMBEDDING_DIMENSIONS) -> list[float]:
    """`text`'s vector: its words and neighbouring pairs hashed, then normalised; a text
    without words is the zero vector."""
    words = _WORD.findall(text.lower())
    vector = [0.0] * dimensions
    for feature in [*words, *(f"{a} {b}" for a, b in itertools.pairwise(words))]:
        bucket, sign = _bucket(feature, dimensions)
        vector[bucket] += sign
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def embeddings_handler() -> Any:
    """The endpoint's handler: `input` a string or a list of them; `dimensions` as
    OpenAI's `text-embedding-3` models take it (default `EMBEDDING_DIMENSIONS`)."""

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        inputs = body.get("input")
        texts = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dimensions = int(body.get("dimensions") or EMBEDDING_DIMENSIONS)
        tokens = sum(len(_WORD.findall(text)) for text in texts)
        return web.json_response(
            {
                "object": "list",
                "model": body.get("model", "scripted"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": embedding_of(t, dimensions)}
                    for i, t in enumerate(texts)
                ],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    return embeddings
