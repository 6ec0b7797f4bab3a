"""Payload encryption: with a key, runs work as ever, Temporal stores only ciphertext,
and the codec server gives the plain text back to whoever holds the key."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from pydantic import SecretStr
from temporalio.api.common.v1 import Payloads
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer, Worker

from tarry.cli.codec_server import DEFAULT_ORIGIN, codec_app
from tarry.client import RunHandle, Tarry, connect_temporal
from tarry.client.run_list import find_runs
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.contracts import ChatMessage, Door, Phase, RunInput, RunState, UserInput
from tarry.core.identities import local_user
from tarry.temporal.codec import EncryptionCodec, new_key
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.conftest import CANARY_KEY, FAST_TIMEOUTS, temporal_cli, tool_result
from tests.deadline import TIMEOUT, deadline
from tests.local_http import serving_app
from workers.plugin import TarryPlugin
from workflows.agent_run import AgentRunWorkflow

PROMPT = "Store the vault code 7431-ALPHA in vault.txt"
ARGUMENTS = {"path": "vault.txt", "content": "vault code 7431-ALPHA"}
ANSWER = "Stored it."
SECRETS = ("7431-ALPHA", "vault.txt", "Store the vault")
"""Pieces of the prompt, the tool arguments and the replies that history must not hold."""
ENCRYPTED = base64.b64encode(b"binary/encrypted").decode()


@dataclass
class EncryptedRun:
    """One run whose every payload was encrypted: a tool call and an answer, a reply
    by update, one by signal, and a result."""

    client: Client
    codec: EncryptionCodec
    model: ScriptedModel
    run: RunHandle
    state: RunState
    """At the first stop point, after the tool call and the answer."""
    transcript: list[ChatMessage]
    """At the first stop point."""


@pytest.fixture(scope="module")
async def encrypted(
    temporal: Client, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[EncryptedRun]:
    """Shared by the tests that read one run: a run takes a second, reading it does not."""
    settings = TarrySettings(
        temporal_address=temporal.service_client.config.target_host,
        tarry_encryption_key=SecretStr(new_key()),
    )
    # The client every Tarry process builds, so the wiring in `connect_temporal` is tested.
    client = await connect_temporal(settings)
    codec = client.data_converter.payload_codec
    assert isinstance(codec, EncryptionCodec)
    steps = [
        call("write_file", ARGUMENTS),
        say(ANSWER),
        say("Noted."),
        call("finish", {"result": "Done with 7431-ALPHA."}),
    ]
    async with ScriptedModel(steps) as model:
        profile = ModelProfile(
            base_url=model.base_url, model="scripted", api_key=SecretStr(CANARY_KEY)
        )
        worker_settings = settings.model_copy(
            update={
                "tarry_workspace_root": tmp_path_factory.mktemp("workspaces"),
                "tarry_storage_dir": tmp_path_factory.mktemp("payloads"),
            }
        )
        plugin = TarryPlugin(worker_settings, profiles={"default": profile})
        task_queue = f"test-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=task_queue, plugins=[plugin]):
            run = await Tarry(client, task_queue).start(
                RunInput(prompt=PROMPT, timeouts=FAST_TIMEOUTS)
            )
            state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
            transcript = await run.transcript()
            await run.send("Remember 7431-ALPHA.")
            # The `user_input` signal, as the Temporal UI sends a reply (the client updates).
            message = UserInput(text="Finish with 7431-ALPHA.")
            await client.get_workflow_handle(run.id).signal("user_input", message)
            await run.result()
            yield EncryptedRun(client, codec, model, run, state, transcript)
        await plugin.aclose()


@pytest.fixture(scope="module")
async def shown(encrypted: EncryptedRun) -> dict[str, Any]:
    """The run's history as `temporal workflow show --output json` prints it, no key."""
    out = await temporal_cli(
        encrypted.client, "workflow", "show", "--workflow-id", encrypted.run.id, "--output", "json"
    )
    history: dict[str, Any] = json.loads(out)
    return history


@pytest.fixture(scope="module")
async def codec_server(encrypted: EncryptedRun) -> AsyncIterator[str]:
    """The codec server on a free port of 127.0.0.1; its base URL."""
    async with serving_app(codec_app(encrypted.codec, DEFAULT_ORIGIN)) as url:
        yield url


def payloads_in(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, payload) for every payload in a JSON history: a dict with metadata."""
    if isinstance(node, dict):
        if isinstance(node.get("metadata"), dict) and "encoding" in node["metadata"]:
            yield path, node
            return
        for key, value in node.items():
            yield from payloads_in(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from payloads_in(value, f"{path}[{i}]")


async def test_an_encrypted_run_calls_a_tool_and_answers(encrypted: EncryptedRun) -> None:
    transcript = encrypted.transcript

    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]
    assert transcript[0].content == PROMPT
    assert tool_result(transcript[2]) == {"ok": True, "data": {"path": "vault.txt", "bytes": 21}}
    assert encrypted.state.last_assistant_text == ANSWER
    # The activities decrypted their inputs: the model got the prompt in plain text.
    assert encrypted.model.requests[0].body["messages"][-1]["content"] == PROMPT


async def test_history_holds_only_ciphertext(
    encrypted: EncryptedRun, shown: dict[str, Any]
) -> None:
    # Search attributes stay plain (below), and so do the SDK's patch markers
    # (`workflow.patched`): they hold the patch's name, which the code chose.
    payloads = [
        (where, p)
        for where, p in payloads_in(shown)
        if ".searchAttributes." not in where and ".markerRecordedEventAttributes." not in where
    ]

    # `.events[3].activityTaskScheduledEventAttributes.input...` -> the event's part.
    assert {where.split(".")[2] for where, _ in payloads} >= {
        "workflowExecutionStartedEventAttributes",
        "activityTaskScheduledEventAttributes",
        "activityTaskCompletedEventAttributes",
        "workflowExecutionUpdateAcceptedEventAttributes",
        "workflowExecutionUpdateCompletedEventAttributes",
        "workflowExecutionSignaledEventAttributes",
        "workflowExecutionCompletedEventAttributes",
        "userMetadata",  # the summaries the UI shows for the run and each step
    }
    for where, payload in payloads:
        assert payload["metadata"]["encoding"] == ENCRYPTED, where
        key_id = base64.b64decode(payload["metadata"]["encryption-key-id"]).decode()
        assert key_id == encrypted.codec.key_id, where
        data = base64.b64decode(payload.get("data", ""))
        assert not any(secret.encode() in data for secret in SECRETS), where
    text = json.dumps(shown)
    assert not any(secret in text for secret in SECRETS)


async def test_search_attributes_stay_plain_so_runs_can_be_listed(
    shown: dict[str, Any],
) -> None:
    attributes = [p for where, p in payloads_in(shown) if ".searchAttributes." in where]

    values = [json.loads(base64.b64decode(p["data"])) for p in attributes if "data" in p]
    assert "WaitingUser" in values


async def test_a_client_without_the_key_lists_an_encrypted_run_without_its_summary(
    encrypted: EncryptedRun, temporal: Client
) -> None:
    run_id = encrypted.run.id

    page = await find_runs(temporal, limit=1000)

    [row] = [r for r in page.rows if r.run_id == run_id]
    assert (row.phase, row.summary) == (Phase.COMPLETED, None)


async def test_an_encrypted_history_replays_with_the_key(encrypted: EncryptedRun) -> None:
    history = await encrypted.client.get_workflow_handle(encrypted.run.id).fetch_history()
    replayer = Replayer(
        workflows=[AgentRunWorkflow], data_converter=encrypted.client.data_converter
    )

    await replayer.replay_workflow(history)


async def test_the_codec_server_decodes_history_payloads_to_plain_json(
    shown: dict[str, Any], codec_server: str
) -> None:
    started = shown["events"][0]["workflowExecutionStartedEventAttributes"]

    # What the Web UI sends: the payloads as history has them, the namespace, its origin.
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{codec_server}/decode",
            json=started["input"],
            headers={"X-Namespace": "default", "Origin": DEFAULT_ORIGIN},
        )

    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == DEFAULT_ORIGIN
    [payload] = response.json()["payloads"]
    assert base64.b64decode(payload["metadata"]["encoding"]) == b"json/plain"
    assert json.loads(base64.b64decode(payload["data"]))["prompt"] == PROMPT


async def test_the_temporal_cli_shows_plain_text_through_the_codec_server(
    encrypted: EncryptedRun, codec_server: str
) -> None:
    out = await temporal_cli(
        encrypted.client,
        "workflow", "show", "--workflow-id", encrypted.run.id, "--output", "json",
        "--codec-endpoint", codec_server,
    )  # fmt: skip

    history = json.loads(out)
    assert ENCRYPTED not in out  # every payload was decrypted
    started = history["events"][0]["workflowExecutionStartedEventAttributes"]
    input = json.loads(base64.b64decode(started["input"]["payloads"][0]["data"]))
    started_by = local_user(None)
    expected = RunInput(prompt=PROMPT, timeouts=FAST_TIMEOUTS, started_by=started_by, door=Door.CLI)
    assert input == expected.model_dump(mode="json")


async def test_the_codec_server_round_trips_encode_and_decode(codec_server: str) -> None:
    payloads = pydantic_data_converter.payload_converter.to_payloads([{"say": "hello"}])
    plain = json_format.MessageToDict(Payloads(payloads=payloads))

    async with httpx.AsyncClient() as http:
        encoded = (await http.post(f"{codec_server}/encode", json=plain)).json()
        decoded = (await http.post(f"{codec_server}/decode", json=encoded)).json()

    assert encoded["payloads"][0]["metadata"]["encoding"] == ENCRYPTED
    assert decoded == plain


async def test_the_codec_server_names_both_keys_for_a_payload_of_another_key(
    codec_server: str, encrypted: EncryptedRun
) -> None:
    other = EncryptionCodec(new_key())
    payloads = await other.encode(pydantic_data_converter.payload_converter.to_payloads(["x"]))

    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{codec_server}/decode",
            json=json_format.MessageToDict(Payloads(payloads=payloads)),
        )

    assert response.status_code == 400
    assert response.text.startswith(
        f"payload was encrypted with key {other.key_id}, this process has {encrypted.codec.key_id}"
    )


async def test_the_codec_server_answers_the_web_ui_preflight_only(codec_server: str) -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace",
    }

    async with httpx.AsyncClient() as http:
        ui = await http.options(
            f"{codec_server}/decode", headers={**preflight, "Origin": DEFAULT_ORIGIN}
        )
        other = await http.options(
            f"{codec_server}/decode", headers={**preflight, "Origin": "http://evil.example"}
        )

    assert ui.status_code == 200
    assert ui.headers["Access-Control-Allow-Origin"] == DEFAULT_ORIGIN
    allowed = {h.strip().lower() for h in ui.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"content-type", "x-namespace"} <= allowed
    assert "POST" in ui.headers["Access-Control-Allow-Methods"]
    assert "Access-Control-Allow-Origin" not in other.headers


async def test_a_wrong_key_names_both_key_ids(encrypted: EncryptedRun, temporal: Client) -> None:
    wrong = TarrySettings(
        temporal_address=temporal.service_client.config.target_host,
        tarry_encryption_key=SecretStr(new_key()),
    )
    client = await connect_temporal(wrong)
    assert isinstance(client.data_converter.payload_codec, EncryptionCodec)
    wrong_id = client.data_converter.payload_codec.key_id

    with pytest.raises(ValueError, match="payload was encrypted with key") as raised:
        await Tarry(client).get(encrypted.run.id).state()

    assert str(raised.value).startswith(
        f"payload was encrypted with key {encrypted.codec.key_id}, this process has {wrong_id}"
    )


async def test_payloads_written_without_encryption_pass_through_decode() -> None:
    codec = EncryptionCodec(new_key())
    plain = await pydantic_data_converter.encode([RunInput(prompt="from before the key")])

    decoded = await codec.decode(plain)

    assert decoded == plain


@pytest.mark.parametrize(
    "malformed", ["not base64!", base64.b64encode(b"sixteen byte key").decode()]
)
def test_a_malformed_key_is_one_clear_error_naming_the_remedy(malformed: str) -> None:
    with pytest.raises(ValueError, match="base64-encoded 32-byte key") as raised:
        EncryptionCodec(malformed)

    assert "new_key()" in str(raised.value)
    assert malformed not in str(raised.value)


async def test_the_codec_server_refuses_to_start_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TARRY_ENCRYPTION_KEY"}
    server = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "tarry-codec-server"),
        "--port", "0",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(server.communicate(), timeout=deadline(30))

    assert server.returncode != 0
    assert out == b""
    [line] = err.decode().splitlines()
    assert line.startswith("error: TARRY_ENCRYPTION_KEY is not set")


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "workers"],
        [str(Path(sys.executable).parent / "tarry"), "status", "x"],
    ],
    ids=["worker", "cli"],
)
async def test_a_malformed_key_is_one_error_line(command: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(
        *command,
        env={"PATH": os.environ.get("PATH", ""), "TARRY_ENCRYPTION_KEY": "not-a-key"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(process.communicate(), timeout=deadline(30))

    lines = err.decode().strip().splitlines()
    assert process.returncode == 1
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: TARRY_ENCRYPTION_KEY must be a base64-encoded 32-byte key")
