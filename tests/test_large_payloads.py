"""Large payloads: tool results and replies of megabytes leave history for the payload
store, the run goes on, and what the store cannot take is a coded error, not a stuck run."""

from __future__ import annotations

import json
from base64 import b64decode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import SecretStr
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from activities.tool_calls import ToolContext, tool
from tarry.client import RunHandle
from tarry.config.settings import TarrySettings
from tarry.contracts import ErrorCode, Phase
from tarry.temporal.codec import data_converter, new_key
from tarry.temporal.storage import FileStorageDriver
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent, temporal_cli, tool_result
from tests.deadline import TIMEOUT, deadline

WAITING = {Phase.WAITING_USER}
MB = 1024 * 1024
THRESHOLD = 256 * 1024
REFERENCE = b"temporal.api.sdk.v1.ExternalStorageReference"
FIVE_MB = "tool output " * (5 * MB // 12)
THREE_MB = "user reply " * (3 * MB // 11)


@tool
def dump(ctx: ToolContext, size: int = 5 * MB) -> str:
    """Returns `size` bytes of text."""
    return FIVE_MB[:size]


async def waiting_run(agent: Agent, *answers: str) -> RunHandle:
    agent.model.add(say("What now?"), *(say(a) for a in answers))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)
    return run


async def storing_client(temporal: Client, **settings: Any) -> Client:
    """A client (and, through `agent_factory`, a worker) with its own storage settings."""
    converter = data_converter(TarrySettings.model_construct(**settings))
    config = temporal.config()
    config["data_converter"] = converter
    return Client(**config)


async def test_a_5_mb_tool_result_reaches_the_model_and_the_run_goes_on(
    agent_factory: Any,
) -> None:
    agent: Agent = await agent_factory(tools=[dump])
    agent.model.add(call("dump", {}), say("That was long."))
    run = await agent.start("dump it")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "That was long."
    seen = agent.model.requests[1].body["messages"][-1]
    assert seen["role"] == "tool"
    assert tool_result_of(seen["content"]) == FIVE_MB


async def test_a_3_mb_reply_by_send_is_answered(agent: Agent) -> None:
    run = await waiting_run(agent, "Read it all.")

    state = await run.send(THREE_MB)

    assert state.last_assistant_text == "Read it all."
    assert agent.model.requests[1].body["messages"][-1]["content"] == THREE_MB


async def test_a_3_mb_reply_by_signal_is_delivered(agent: Agent) -> None:
    run = await waiting_run(agent, "Read it all.")

    await run.reply(THREE_MB)
    await agent.model.wait_for_requests(2, timeout=deadline(10))
    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "Read it all."
    assert agent.model.requests[1].body["messages"][-1]["content"] == THREE_MB


async def test_history_holds_references_not_the_payloads(agent_factory: Any) -> None:
    agent: Agent = await agent_factory(tools=[dump])
    agent.model.add(say("What now?"), call("dump", {}), say("Both read."))
    run = await agent.start("hello")
    await run.wait_for(WAITING, TIMEOUT)

    await run.send(THREE_MB)

    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()
    payloads = [p for event in history.events for p in payloads_in(event)]
    assert max(p.ByteSize() for p in payloads) < THRESHOLD
    stored = [p.external_payloads[0].size_bytes for p in payloads if p.external_payloads]
    # Both megabyte payloads are referenced, and each reference is tiny.
    assert sum(1 for size in stored if size > 3 * MB) >= 2
    transcript = await run.transcript()
    assert [m.content for m in transcript if m.role == "user"] == ["hello", THREE_MB]
    assert tool_result(transcript[-2])["data"] == FIVE_MB


async def test_with_encryption_the_store_holds_only_ciphertext(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    client = await storing_client(
        temporal, tarry_storage_dir=store, tarry_encryption_key=SecretStr(new_key())
    )
    agent: Agent = await agent_factory(tools=[dump], client=client)
    agent.model.add(call("dump", {}), say("That was long."))
    run = await agent.start("dump it")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "That was long."
    stored = [p.read_bytes() for p in store.rglob("*") if p.is_file()]
    assert max(len(blob) for blob in stored) > 5 * MB
    assert not any(b"tool output" in blob for blob in stored)


def store_with_a_1_mb_limit(tmp_path: Path) -> dict[str, Any]:
    return {"storage_driver": FileStorageDriver(tmp_path, max_payload_bytes=MB)}


def store_in_an_unusable_directory(tmp_path: Path) -> dict[str, Any]:
    # A file where the directory should be: unusable even to root, unlike permissions.
    blocker = tmp_path / "not a directory"
    blocker.touch()
    return {"tarry_storage_dir": blocker}


@pytest.mark.parametrize(
    "store",
    [store_with_a_1_mb_limit, store_in_an_unusable_directory],
    ids=["over the driver's limit", "directory unusable"],
)
async def test_a_tool_result_the_store_cannot_take_is_a_coded_tool_error_not_retried(
    agent_factory: Any, temporal: Client, tmp_path: Path, store: Any
) -> None:
    client = await storing_client(temporal, **store(tmp_path))
    agent: Agent = await agent_factory(tools=[dump], client=client)
    agent.model.add(call("dump", {"size": 2 * MB}), say("Too much, then."))
    run = await agent.start("dump it")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "Too much, then."
    error = tool_result_of_failure(agent.model.requests[1].body["messages"][-1]["content"])
    assert error["code"] == ErrorCode.PAYLOAD_NOT_STORED
    assert await agent.retries(run) == []


async def test_results_the_store_takes_one_at_a_time_reach_the_model_together(
    agent_factory: Any, temporal: Client, tmp_path: Path
) -> None:
    # Each tool result fits the store; a model request carrying both would not. Model
    # requests carry only what is new since the last call, so none ever does.
    client = await storing_client(temporal, **store_with_a_1_mb_limit(tmp_path))
    agent: Agent = await agent_factory(tools=[dump], client=client)
    agent.model.add(
        call("dump", {"size": 600_000}), call("dump", {"size": 600_001}), say("Read both.")
    )
    run = await agent.start("dump it")

    state = await run.wait_for(WAITING, TIMEOUT)

    assert state.last_assistant_text == "Read both."
    results = [m for m in await run.transcript() if m.role == "tool"]
    assert [len(m.content or "") > 600_000 for m in results] == [True, True]


async def test_temporal_workflow_show_prints_a_reference_for_a_5_mb_tool_result(
    agent_factory: Any, payload_store: Path
) -> None:
    agent: Agent = await agent_factory(tools=[dump])
    agent.model.add(call("dump", {}), say("That was long."))
    run = await agent.start("dump it")
    await run.wait_for(WAITING, TIMEOUT)

    shown = await temporal_cli(
        agent.tarry.client, "workflow", "show", "--workflow-id", run.id, "--output", "json"
    )

    assert len(shown) < THRESHOLD
    references = references_in(json.loads(shown))
    assert {r["driverName"] for r in references} == {"tarry.file"}
    for reference in references:
        digest = reference["claimData"]["sha256"]
        assert (payload_store / digest[:2] / digest).stat().st_size > 5 * MB


def tool_result_of(content: str) -> Any:
    return json.loads(content)["data"]


def tool_result_of_failure(content: str) -> Any:
    result = json.loads(content)
    assert result["ok"] is False
    return result["error"]


def payloads_in(message: Message) -> Iterator[Payload]:
    """Every payload anywhere in a protobuf message, e.g. a history event."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            values = list(value.values())
        elif field.is_repeated:
            values = list(value)
        else:
            values = [value]
        for v in values:
            if isinstance(v, Message):
                yield from payloads_in(v)


def references_in(node: Any) -> list[Any]:
    """The storage references in the `temporal` CLI's JSON, which base64-encodes payloads."""
    if isinstance(node, list):
        return [r for item in node for r in references_in(item)]
    if not isinstance(node, dict):
        return []
    found = [r for value in node.values() for r in references_in(value)]
    message_type = node.get("metadata", {}).get("messageType", "")
    if isinstance(message_type, str) and b64decode(message_type) == REFERENCE:
        found.append(json.loads(b64decode(node["data"])))
    return found
