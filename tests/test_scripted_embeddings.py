"""The scripted model's `/v1/embeddings`, over real HTTP: deterministic vectors in
OpenAI's shape, nearer for texts that share words."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tarry.testing.scripted_embeddings import EMBEDDING_DIMENSIONS
from tarry.testing.scripted_model import ScriptedModel


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as scripted:
        yield scripted


async def embed(model: ScriptedModel, input: str | list[str], **body: Any) -> dict[str, Any]:
    """The endpoint's answer to `input` and the rest of `body`."""
    async with httpx.AsyncClient() as http:
        body |= {"model": "scripted", "input": input}
        response = await http.post(f"{model.base_url}/embeddings", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_the_same_text_always_gets_the_same_unit_vector(model: ScriptedModel) -> None:
    first = await embed(model, "the pricing page")
    again = await embed(model, "the pricing page")

    vector = first["data"][0]["embedding"]
    assert vector == again["data"][0]["embedding"]
    assert len(vector) == EMBEDDING_DIMENSIONS
    assert math.isclose(math.fsum(v * v for v in vector), 1.0)


async def test_texts_that_share_words_are_nearer_than_texts_that_share_none(
    model: ScriptedModel,
) -> None:
    texts = ["Priya owns the pricing page", "who owns the pricing page?", "bake a lemon cake"]
    answer = await embed(model, texts)

    owner, question, cake = (d["embedding"] for d in answer["data"])
    assert cosine(owner, question) > cosine(owner, cake)
    assert [d["index"] for d in answer["data"]] == [0, 1, 2]


async def test_the_answer_counts_its_tokens_and_takes_dimensions(model: ScriptedModel) -> None:
    answer = await embed(model, ["one two", "three"], dimensions=64)

    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert {len(d["embedding"]) for d in answer["data"]} == {64}
