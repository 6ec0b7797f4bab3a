"""The conversation a model call sees: stored once, extended per turn, cut to a budget.

The workflow sends the LLM activity only the messages added since its last call and a
`ContextRef` to the rest. `ContextStore` keeps the rest as a chain of nodes (each the
messages of one turn plus a reference to the node before) in the same storage driver
that holds large payloads, encoded with the deployment's codec, so nothing is stored
in plain text that Temporal would have seen encrypted.

A conversation also keeps the tool definitions it is offered: the request that starts
it sends them, and later turns send none, so the run's catalogue enters history once.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel
from temporalio.converter import DataConverter, StorageDriver
from temporalio.exceptions import ApplicationError

from tarry.contracts import ChatMessage, ContextRef, ErrorCode, ToolDefinition, estimate_tokens
from tarry.temporal.storage import FileStorageDriver, load_model, store_model

_CACHED_CONVERSATIONS = 256
"""Conversations kept in memory per worker: a run's next call usually finds its prefix
here and reads nothing from storage."""


class _Node(BaseModel):
    parent: ContextRef | None
    messages: list[ChatMessage]
    tools: list[ToolDefinition] | None = None
    """The tools offered from this node on; None: its parent's (nodes stored before
    the catalogue have none anywhere)."""


@dataclass(frozen=True)
class Conversation:
    """A stored conversation: its newest messages (all of them, unless the store keeps a
    window: see `ContextStore`), how many it has in all, and the tools it is offered."""

    messages: list[ChatMessage]
    tools: list[ToolDefinition] | None
    count: int


_EMPTY = Conversation([], None, 0)


class ContextStore:
    """Conversation prefixes in a storage driver, with the newest ones cached.

    With `window_tokens` (the largest context budget of the worker's profiles) a
    conversation keeps only its newest messages that fit it: all a model call can be
    sent (`fit_to_budget` of a smaller budget picks the same ones), and a cache of long
    conversations then stays as small as a cache of short ones."""

    def __init__(
        self, driver: StorageDriver, converter: DataConverter, window_tokens: int | None = None
    ) -> None:
        self._driver = driver
        self._converter = converter
        self._window_tokens = window_tokens
        self._cache: OrderedDict[str, Conversation] = OrderedDict()

    @classmethod
    def on_disk(cls, root: Path, converter: DataConverter) -> ContextStore:
        """Conversations as files under `root` (`tarry.temporal.storage.FileStorageDriver`)."""
        return cls(FileStorageDriver(root), converter)

    async def extend(
        self,
        ref: ContextRef | None,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolDefinition] | None = None,
    ) -> tuple[ContextRef, Conversation]:
        """Stores `messages` (and `tools`, when given: they replace the ones offered so
        far) after `ref`'s prefix; returns the new reference and the whole conversation."""
        prefix = await self.load(ref) if ref else _EMPTY
        if ref and not messages and tools is None:
            return ref, prefix
        node = _Node(
            parent=ref, messages=list(messages), tools=None if tools is None else list(tools)
        )
        claim = await store_model(self._driver, self._converter, node)
        offered = prefix.tools if node.tools is None else node.tools
        before = prefix.count - len(prefix.messages)
        whole = self._windowed(prefix.messages + node.messages, offered, before)
        new = ContextRef(claim=claim, count=whole.count)
        self._remember(new, whole)
        return new, whole

    async def load(self, ref: ContextRef) -> Conversation:
        """The conversation `ref` names; `LLM_CONTEXT_MISSING` when storage lacks it."""
        # Walk back from the newest node to one this worker has cached, or to the start.
        nodes: list[_Node] = []
        start = _EMPTY
        cursor: ContextRef | None = ref
        while cursor is not None:
            if (cached := self._cache.get(_key(cursor))) is not None:
                start = cached
                break
            node = await self._read(cursor)
            nodes.append(node)
            cursor = node.parent
        messages, tools = list(start.messages), start.tools
        for node in reversed(nodes):
            messages += node.messages
            tools = tools if node.tools is None else node.tools
        whole = self._windowed(messages, tools, start.count - len(start.messages))
        if whole.count != ref.count:
            raise _missing(f"the stored conversation has {whole.count} messages, not {ref.count}")
        self._remember(ref, whole)
        return whole

    def _windowed(
        self, messages: list[ChatMessage], tools: list[ToolDefinition] | None, before: int
    ) -> Conversation:
        """`messages`, which follow `before` others, cut to the window this store keeps."""
        count = before + len(messages)
        if self._window_tokens is not None:
            messages = fit_to_budget(messages, self._window_tokens)
        return Conversation(messages, tools, count)

    async def _read(self, ref: ContextRef) -> _Node:
        try:
            return await load_model(self._driver, self._converter, ref.claim, _Node)
        except Exception as e:
            raise _missing(f"{type(e).__name__}: {e}") from None

    def _remember(self, ref: ContextRef, whole: Conversation) -> None:
        key = _key(ref)
        self._cache[key] = whole
        self._cache.move_to_end(key)
        while len(self._cache) > _CACHED_CONVERSATIONS:
            self._cache.popitem(last=False)


def fit_to_budget(messages: Sequence[ChatMessage], budget: int) -> list[ChatMessage]:
    """The newest messages whose estimated tokens fit `budget`, never fewer than the
    newest exchange. An assistant message and the tool results answering its calls stay
    together: a provider refuses a tool result whose call it cannot see."""
    groups: list[list[ChatMessage]] = []
    for message in messages:
        if message.role == "tool" and groups:
            groups[-1].append(message)
        else:
            groups.append([message])
    kept: list[list[ChatMessage]] = []
    used = 0
    for group in reversed(groups):
        cost = sum(estimate_tokens(m) for m in group)
        if kept and used + cost > budget:
            break
        kept.append(group)
        used += cost
    return [m for group in reversed(kept) for m in group]


def _key(ref: ContextRef) -> str:
    return json.dumps(ref.claim, sort_keys=True)


def _missing(detail: str) -> ApplicationError:
    return ApplicationError(
        f"the stored conversation cannot be read ({detail}); the run sends it whole again",
        type=ErrorCode.LLM_CONTEXT_MISSING,
        non_retryable=True,
    )
