"""The scripted model, exercised over real HTTP as the LLM activity calls it."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from tarry.contracts import Usage
from tarry.contracts.guardrails import WITHHELD_NOTE
from tarry.testing.script import MAX_STREAM_PIECES
from tarry.testing.scripted_model import (
    Conversation,
    Script,
    ScriptedModel,
    ScriptedToolCall,
    ScriptStep,
    call,
    calls,
    fail,
    say,
)
from tests.deadline import deadline

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as m:
        yield m


@pytest.fixture
async def client(model: ScriptedModel) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=model.base_url, timeout=deadline(5.0)) as c:
        yield c


async def chat(client: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    return await client.post(
        "/chat/completions", json={"model": "m1", "messages": MESSAGES, **extra}
    )


async def test_base_url_reports_the_real_port(model: ScriptedModel) -> None:
    assert model.base_url.startswith("http://127.0.0.1:")
    assert model.base_url.endswith("/v1")
    assert not model.base_url.startswith("http://127.0.0.1:0/")


async def test_text_answer_has_the_openai_shape(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("hello"))
    response = await chat(client)
    assert response.status_code == 200
    assert response.json() == {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "m1",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    assert model.remaining == 0


async def test_scripted_usage_and_finish_reason_are_sent(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    usage = Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)
    model.add(say("cut", usage=usage, finish_reason="length"))
    answer = (await chat(client)).json()
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == usage.model_dump()


async def test_tool_calls_send_dict_args_as_json_and_str_args_verbatim(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(
        call("ls", {"path": "."}),
        calls(
            ScriptedToolCall(name="read", arguments={"path": "a b"}, id="mine"),
            ScriptedToolCall(name="write", arguments="{not json"),
        ),
    )
    first = (await chat(client)).json()["choices"][0]
    assert first["finish_reason"] == "tool_calls"
    assert first["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1_0",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"path": "."}'},
            }
        ],
    }
    second = (await chat(client)).json()["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in second] == ["mine", "call_2_1"]
    assert json.loads(second[0]["function"]["arguments"]) == {"path": "a b"}
    assert second[1]["function"]["arguments"] == "{not json"


async def test_steps_are_consumed_in_order_across_an_error_step(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(fail(500), say("recovered"))
    first = await chat(client)
    assert first.status_code == 500
    assert first.json()["error"]["type"] == "server_error"
    second = await chat(client)
    assert second.json()["choices"][0]["message"]["content"] == "recovered"
    assert [r.step for r in model.requests] == [0, 1]


async def test_error_step_sends_its_headers_and_message(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(fail(429, headers={"Retry-After": "1"}, content="slow down"))
    response = await chat(client)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "1"
    assert response.json() == {"error": {"message": "slow down", "type": "rate_limit_error"}}


async def test_raw_body_is_sent_verbatim(model: ScriptedModel, client: httpx.AsyncClient) -> None:
    model.add(say("ignored", body="not json"))
    response = await chat(client)
    assert response.status_code == 200
    assert response.text == "not json"


async def test_exhausted_script_answers_400_with_a_clear_message(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("only one"))
    await chat(client)
    response = await chat(client)
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "scripted model: script exhausted after 1 requests" in message
    assert model.requests[-1].step == -1


async def test_request_without_messages_is_rejected(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("kept"))
    assert (await client.post("/chat/completions", content=b"{oops")).status_code == 400
    assert (await client.post("/chat/completions", json={"model": "m"})).status_code == 400
    assert model.remaining == 1
    assert [r.body for r in model.requests] == [{"model": "m"}]


async def test_request_body_is_recorded(model: ScriptedModel, client: httpx.AsyncClient) -> None:
    model.add(say("hi"))
    await chat(client, temperature=0)
    recorded = model.requests[0]
    assert recorded.body == {"model": "m1", "messages": MESSAGES, "temperature": 0}
    assert recorded.answered
    assert not recorded.cancelled


async def test_authorization_header_is_recorded(model: ScriptedModel) -> None:
    model.add(say("hi"))
    async with httpx.AsyncClient(headers={"Authorization": "Bearer k"}) as c:
        await c.post(f"{model.base_url}/chat/completions", json={"messages": MESSAGES})
    headers = model.requests[0].headers
    assert headers["authorization"] == headers["Authorization"] == "Bearer k"


@pytest.mark.parametrize("how", ["client timeout", "task cancelled"])
async def test_client_that_disconnects_during_a_delay_is_recorded_as_cancelled(
    model: ScriptedModel, how: str
) -> None:
    model.add(say("too late", delay=30))
    timeout = deadline(0.2) if how == "client timeout" else deadline(30)
    async with httpx.AsyncClient(base_url=model.base_url, timeout=timeout) as c:
        if how == "client timeout":
            with pytest.raises(httpx.ReadTimeout):
                await chat(c)
        else:
            task = asyncio.create_task(chat(c))
            await model.wait_for_requests(1, timeout=deadline(10))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    # The server notices the hang-up asynchronously: poll for it, for at most 5 s.
    for _ in range(500):
        if model.requests[0].cancelled:
            break
        await asyncio.sleep(0.01)
    assert model.requests[0].cancelled
    assert not model.requests[0].answered


async def test_wait_for_requests_returns_the_nth_request(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("a"), say("b"))
    waiter = asyncio.create_task(model.wait_for_requests(2, timeout=deadline(10)))
    await chat(client, n=1)
    assert not waiter.done()
    await chat(client, n=2)
    recorded = await waiter
    assert recorded.body["n"] == 2
    assert recorded.step == 1


async def test_wait_for_requests_times_out_clearly(model: ScriptedModel) -> None:
    timeout = deadline(0.05)  # scaled under load: the message names the wait it had
    expected = f"0 requests arrived, expected at least 1 within {timeout}s"

    with pytest.raises(TimeoutError, match=re.escape(expected)):
        await model.wait_for_requests(1, timeout=timeout)


async def test_models_lists_the_scripted_model(client: httpx.AsyncClient) -> None:
    response = await client.get("/models")
    assert response.json() == {"object": "list", "data": [{"id": "scripted", "object": "model"}]}


async def test_cli_serves_a_script_until_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([say("from file").model_dump()]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tarry.testing.scripted_model",
        "--port", "0", "--script", str(script),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), deadline(10))).decode().strip()
        assert line.startswith("scripted model listening on http://127.0.0.1:")
        async with httpx.AsyncClient() as c:
            url = line.rsplit(" ", 1)[1] + "/chat/completions"
            answer = (await c.post(url, json={"messages": MESSAGES})).json()
        assert answer["choices"][0]["message"]["content"] == "from file"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), deadline(10)) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def streamed(client: httpx.AsyncClient, **extra: Any) -> list[str]:
    """The `data:` payloads of a streamed answer, in order."""
    body = {"messages": MESSAGES, "stream": True, **extra}
    async with client.stream("POST", "/chat/completions", json=body) as response:
        assert response.headers["content-type"] == "text/event-stream"
        return [
            line.removeprefix("data: ")
            async for line in response.aiter_lines()
            if line.startswith("data: ")
        ]


async def test_a_streamed_answer_sends_text_in_pieces_then_usage_then_done(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("hello world", chunk_chars=3))
    events = await streamed(client, stream_options={"include_usage": True})
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert [d.get("content") for d in deltas] == ["", "hel", "lo ", "wor", "ld", None]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


async def test_a_long_streamed_text_comes_in_at_most_max_stream_pieces_events(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    text = "word " * 200_000  # a megabyte: an echo of a long message
    model.add(say(text))

    events = await streamed(client)

    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
    pieces = [d["content"] for d in deltas if d.get("content")]
    assert len(pieces) <= MAX_STREAM_PIECES
    assert "".join(pieces) == text


async def test_a_step_without_a_piece_limit_streams_every_piece_at_its_size(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    text = "word " * 40_000  # 200 kB: 50,000 pieces, past MAX_STREAM_PIECES
    model.add(say(text, chunk_chars=4, max_pieces=None))

    events = await streamed(client)

    deltas = [json.loads(e)["choices"][0]["delta"] for e in events[:-1]]
    pieces = [d["content"] for d in deltas if d.get("content")]
    assert [len(p) for p in pieces] == [4] * 50_000
    assert "".join(pieces) == text


async def test_a_streamed_tool_call_sends_its_arguments_in_fragments_by_index(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(calls(ScriptedToolCall(name="a", arguments="xyz"), ScriptedToolCall(name="b")))
    chunks = [json.loads(e) for e in (await streamed(client))[:-1]]
    parts = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert parts == [
        {"index": 0, "id": "call_1_0", "type": "function",
         "function": {"name": "a", "arguments": ""}},
        {"index": 0, "function": {"arguments": "xyz"}},
        {"index": 1, "id": "call_1_1", "type": "function",
         "function": {"name": "b", "arguments": ""}},
        {"index": 1, "function": {"arguments": "{}"}},
    ]  # fmt: skip
    assert "usage" not in chunks[-1]  # not asked for


async def test_a_cut_stream_is_an_incomplete_body(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("hello world", stream_fault="cut", fault_after=2))
    with pytest.raises(httpx.RemoteProtocolError):
        await streamed(client)


@pytest.mark.parametrize("fault", ["no_end", "malformed"])
async def test_a_stream_can_end_early_or_send_a_malformed_event(
    model: ScriptedModel, client: httpx.AsyncClient, fault: str
) -> None:
    model.add(say("hello world", stream_fault=fault, fault_after=2))
    events = await streamed(client)
    assert "[DONE]" not in events
    assert len(events) == 2 + (fault == "malformed")


async def test_a_plain_step_answers_a_streaming_request_with_json(
    model: ScriptedModel, client: httpx.AsyncClient
) -> None:
    model.add(say("hello", plain=True))
    response = await chat(client, stream=True)
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["choices"][0]["message"]["content"] == "hello"


# --- Anthropic's dialect ----------------------------------------------------


@pytest.fixture
async def anthropic(model: ScriptedModel) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=model.root_url, timeout=deadline(5.0)) as c:
        yield c


async def messages(client: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    body = {"model": "m1", "max_tokens": 100, "messages": MESSAGES, **extra}
    return await client.post("/v1/messages", json=body)


async def test_the_messages_endpoint_answers_with_content_blocks(
    model: ScriptedModel, anthropic: httpx.AsyncClient
) -> None:
    model.add(ScriptStep(content="let me look", tool_calls=[ScriptedToolCall(name="ls")]))

    response = await messages(anthropic)

    assert response.json() == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m1",
        "content": [
            {"type": "text", "text": "let me look"},
            {"type": "tool_use", "id": "toolu_1_0", "name": "ls", "input": {}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 5,
        },
    }


async def test_the_messages_endpoint_streams_anthropic_events(
    model: ScriptedModel, anthropic: httpx.AsyncClient
) -> None:
    model.add(say("hello", chunk_chars=2))

    response = await messages(anthropic, stream=True)

    lines = response.text.splitlines()
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert names == [
        "message_start",
        "ping",
        "content_block_start",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


async def test_the_messages_endpoint_sends_anthropic_errors(
    model: ScriptedModel, anthropic: httpx.AsyncClient
) -> None:
    model.add(fail(529))

    response = await messages(anthropic)

    assert response.status_code == 529
    assert response.json()["error"]["type"] == "overloaded_error"


async def test_the_prompt_cache_reads_what_an_earlier_request_marked(
    model: ScriptedModel, anthropic: httpx.AsyncClient
) -> None:
    marked = [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]
    model.add(say("one"), say("two"))

    first = (await messages(anthropic, system=marked)).json()["usage"]
    second = (await messages(anthropic, system=marked)).json()["usage"]

    assert (first["cache_creation_input_tokens"], first["cache_read_input_tokens"]) == (10, 0)
    assert (second["cache_creation_input_tokens"], second["cache_read_input_tokens"]) == (0, 10)
    assert first["input_tokens"] == second["input_tokens"] == 10


def conversation(prompt: str, answers: int) -> list[dict[str, Any]]:
    """A conversation that opened with `prompt`, after `answers` answers of the model."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": prompt},
    ]
    for n in range(answers):
        messages += [
            {"role": "assistant", "content": f"answer {n}"},
            {"role": "user", "content": f"reply {n}"},
        ]
    return messages


async def said(client: httpx.AsyncClient, messages: list[dict[str, Any]]) -> str:
    """The text of the model's answer to `messages`."""
    answer = await client.post("/chat/completions", json={"messages": messages})
    text: str = answer.json()["choices"][0]["message"]["content"]
    return text


PLAN = Conversation(prompt="Plan my week", steps=[say("first"), say("second")])


async def test_a_conversation_is_answered_by_where_it_stands_whatever_came_before() -> None:
    async with (
        ScriptedModel(conversations=[PLAN]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        texts = [
            await said(client, conversation("plan  my WEEK", 1)),  # case and spacing aside
            await said(client, conversation("Plan my week", 1)),
            await said(client, conversation("Plan my week", 0)),
        ]

    assert texts == ["second", "second", "first"]
    assert [r.step for r in model.requests] == [-1, -1, -1]  # none of the steps in order


async def test_a_conversation_added_while_serving_answers_a_repeated_request_alike() -> None:
    async with (
        ScriptedModel([say("in order")]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        model.add_conversation("Plan my week", say("first"), say("second"))
        # The same request twice, as a worker sends it again after a timed-out attempt.
        texts = [await said(client, conversation("Plan my week", 0)) for _ in range(2)]

    assert texts == ["first", "first"]
    assert model.remaining == 1  # the steps in order are left for other requests


async def test_other_requests_get_the_steps_in_order() -> None:
    async with (
        ScriptedModel([say("in order")], conversations=[PLAN]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        past_its_steps = await said(client, conversation("Plan my week", 2))
        exhausted = await client.post("/chat/completions", json={"messages": MESSAGES})

    assert past_its_steps == "in order"
    assert exhausted.status_code == 400


async def test_an_anthropic_conversation_is_matched_by_its_text_blocks() -> None:
    opening = [{"role": "user", "content": [{"type": "text", "text": "Plan my week"}]}]
    async with (
        ScriptedModel(conversations=[PLAN]) as model,
        httpx.AsyncClient(base_url=model.root_url) as client,
    ):
        body = {"model": "m1", "max_tokens": 100, "messages": opening}
        answer = (await client.post("/v1/messages", json=body)).json()

    assert answer["content"] == [{"type": "text", "text": "first"}]


WRITE = call("write_file", {"path": "a.md", "content": "hi"}, if_rejected=say("I wrote nothing."))
SAVE = Conversation(prompt="Save a.md", steps=[WRITE, say("Written.")])
REJECTED = json.dumps({"ok": False, "error": {"code": "TOOL_REJECTED", "message": "no"}})
WRITTEN = json.dumps({"ok": True, "data": {"bytes": 2}})


def after_the_write(result: str) -> list[dict[str, Any]]:
    """The "Save a.md" conversation once the write's `result` came back."""
    asked = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": "{}"}}
    return [
        {"role": "user", "content": "Save a.md"},
        {"role": "assistant", "content": None, "tool_calls": [asked]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]


async def test_after_a_rejected_call_a_conversation_answers_with_the_step_s_if_rejected() -> None:
    async with (
        ScriptedModel(conversations=[SAVE]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        answer = await said(client, after_the_write(REJECTED))

    assert answer == "I wrote nothing."


async def test_after_a_call_that_ran_a_conversation_plays_its_next_step() -> None:
    async with (
        ScriptedModel(conversations=[SAVE]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        answer = await said(client, after_the_write(WRITTEN))

    assert answer == "Written."


async def test_after_a_rejected_call_the_steps_in_order_answer_with_its_if_rejected() -> None:
    async with (
        ScriptedModel([WRITE, say("Written.")]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        await client.post("/chat/completions", json={"messages": MESSAGES})
        answer = await said(client, after_the_write(REJECTED))

    assert answer == "I wrote nothing."
    assert model.remaining == 1  # "Written." is left for a write that ran


PROMISE = Conversation(
    prompt="Refund me",
    steps=[say("We guarantee it.", if_withheld=say("I will ask.", if_withheld=say("Asked.")))],
)


def withheld(times: int) -> list[dict[str, Any]]:
    """The "Refund me" conversation after an output guardrail withheld `times` answers."""
    note = {"role": "system", "content": f"{WITHHELD_NOTE} 'no-promises'. Answer again."}
    return [{"role": "user", "content": "Refund me"}, *[note] * times]


AFTER_WITHHOLDING = [(0, "We guarantee it."), (1, "I will ask."), (2, "Asked.")]


@pytest.mark.parametrize(("times", "answer"), AFTER_WITHHOLDING)
async def test_in_place_of_a_withheld_answer_a_conversation_gives_the_step_s_if_withheld(
    times: int, answer: str
) -> None:
    async with (
        ScriptedModel(conversations=[PROMISE]) as model,
        httpx.AsyncClient(base_url=model.base_url) as client,
    ):
        assert await said(client, withheld(times)) == answer


async def test_an_anthropic_rejected_tool_result_gets_the_if_rejected_answer() -> None:
    asked = {"type": "tool_use", "id": "c1", "name": "write_file", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "c1", "content": REJECTED, "is_error": True}
    turns = [
        {"role": "user", "content": [{"type": "text", "text": "Save a.md"}]},
        {"role": "assistant", "content": [asked]},
        {"role": "user", "content": [result]},
    ]
    async with (
        ScriptedModel(conversations=[SAVE]) as model,
        httpx.AsyncClient(base_url=model.root_url) as client,
    ):
        body = {"model": "m1", "max_tokens": 100, "messages": turns}
        answer = (await client.post("/v1/messages", json=body)).json()

    assert answer["content"] == [{"type": "text", "text": "I wrote nothing."}]


def test_a_script_file_with_a_misspelt_key_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match="contnet"):
        Script.from_json('{"steps": [{"contnet": "hello"}]}')


def test_a_script_file_of_a_bare_list_is_its_steps() -> None:
    script = Script.from_json('[{"content": "hello"}]')

    assert script == Script(steps=[say("hello")])


GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "scripted-model.md"


async def test_the_guides_example_script_plays_as_the_guide_says(tmp_path: Path) -> None:
    example = re.search(r"```json\n(\{.*?)```", GUIDE.read_text(), flags=re.DOTALL)
    assert example is not None
    script = tmp_path / "my-script.json"
    script.write_text(example.group(1))
    tarry = Path(sys.executable).parent / "tarry"
    proc = await asyncio.create_subprocess_exec(
        str(tarry), "scripted-model", "--script", str(script), "--port", "0",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), deadline(30))).decode().strip()
        url = line.rsplit(" ", 1)[1] + "/chat/completions"
        opening = [{"role": "user", "content": "What is in my workspace?"}]
        async with httpx.AsyncClient() as c:
            listed = (await c.post(url, json={"messages": opening})).json()
            overloaded = await c.post(url, json={"messages": MESSAGES})
            hello = (await c.post(url, json={"messages": MESSAGES})).json()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), deadline(10)) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()

    [listing] = listed["choices"][0]["message"]["tool_calls"]
    assert listing["function"]["name"] == "list_files"
    assert overloaded.status_code == 503
    assert hello["choices"][0]["message"]["content"] == "Hello!"
    assert hello["usage"]["total_tokens"] == 15
