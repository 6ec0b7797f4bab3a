"""`POST /v1/agui`: an AG-UI frontend talks to a durable run, spoken to here with the
protocol package's own types: its input model, and its events read back from the stream."""

from __future__ import annotations

import asyncio
import json
import uuid

from ag_ui.core import (
    BaseEvent,
    Event,
    EventType,
    RunAgentInput,
    RunErrorEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from httpx_sse import aconnect_sse
from pydantic import TypeAdapter

from tarry.contracts import Phase
from tarry.testing.scripted_model import call, say
from tests.deadline import deadline
from tests.http_api import Api

EVENT: TypeAdapter[BaseEvent] = TypeAdapter(Event)


async def exchange(api: Api, thread: str, *texts: str) -> list[BaseEvent]:
    """One AG-UI run on `thread` whose conversation so far is `texts` from the user."""
    events = await agui_events(api, thread, *texts)
    api.run(thread)
    return events


async def agui_events(api: Api, thread: str, *texts: str) -> list[BaseEvent]:
    """The events of one AG-UI run on `thread`, which must end within a deadline."""
    request = RunAgentInput(
        thread_id=thread,
        run_id=f"agui-{uuid.uuid4().hex[:6]}",
        messages=[UserMessage(id=f"u{n}", content=text) for n, text in enumerate(texts)],
    )
    events: list[BaseEvent] = []
    body = json.loads(request.model_dump_json(by_alias=True))
    async with (
        asyncio.timeout(deadline(30)),
        aconnect_sse(api.http, "POST", "/v1/agui", json=body) as source,
    ):
        assert source.response.headers["content-type"].startswith("text/event-stream")
        async for sse in source.aiter_sse():
            events.append(EVENT.validate_json(sse.data))
    return events


def of_type(events: list[BaseEvent], kind: EventType) -> list[BaseEvent]:
    return [e for e in events if e.type == kind]


async def test_a_new_thread_starts_a_run_and_its_text_arrives_as_content_events(
    api: Api,
) -> None:
    api.agent.model.add(say("Hello from a durable run.", chunk_chars=3, chunk_delay=0.05))

    events = await exchange(api, "thread-new", "hi there")

    assert events[0].type == EventType.RUN_STARTED
    assert events[-1].type == EventType.RUN_FINISHED
    content = of_type(events, EventType.TEXT_MESSAGE_CONTENT)
    assert len(content) > 1
    assert "".join(e.delta for e in content if isinstance(e, TextMessageContentEvent)) == (
        "Hello from a durable run."
    )
    assert (events[1].type, events[-2].type) == (
        EventType.TEXT_MESSAGE_START,
        EventType.TEXT_MESSAGE_END,
    )
    transcript = await api.run("thread-new").transcript()
    assert [m.content for m in transcript] == ["hi there", "Hello from a durable run."]


async def test_a_tool_call_arrives_as_tool_call_events_with_its_result(api: Api) -> None:
    api.agent.model.add(
        call("list_files", {}, id="c1", chunk_chars=1, chunk_delay=0.1), say("nothing there")
    )

    events = await exchange(api, "thread-tools", "look around")

    kinds = [e.type for e in events]
    start = kinds.index(EventType.TOOL_CALL_START)
    assert kinds.index(EventType.TOOL_CALL_END) > start
    assert kinds.index(EventType.TOOL_CALL_RESULT) > kinds.index(EventType.TOOL_CALL_END)
    [started] = of_type(events, EventType.TOOL_CALL_START)
    assert isinstance(started, ToolCallStartEvent)
    assert (started.tool_call_id, started.tool_call_name) == ("c1", "list_files")
    arguments = of_type(events, EventType.TOOL_CALL_ARGS)
    assert "".join(e.delta for e in arguments if isinstance(e, ToolCallArgsEvent)) == "{}"
    [result] = of_type(events, EventType.TOOL_CALL_RESULT)
    assert isinstance(result, ToolCallResultEvent)
    assert result.tool_call_id == "c1"
    assert json.loads(str(result.content))["ok"] is True
    assert events[-1].type == EventType.RUN_FINISHED


async def test_a_second_request_on_the_same_thread_continues_the_same_run(api: Api) -> None:
    api.agent.model.add(say("first answer"), say("second answer"))
    await exchange(api, "thread-two", "hello")

    events = await exchange(api, "thread-two", "hello", "and again")

    content = of_type(events, EventType.TEXT_MESSAGE_CONTENT)
    assert "".join(e.delta for e in content if isinstance(e, TextMessageContentEvent)) == (
        "second answer"
    )
    run = api.run("thread-two")
    transcript = await run.transcript()
    assert [m.content for m in transcript] == [
        "hello",
        "first answer",
        "and again",
        "second answer",
    ]
    assert (await run.state()).phase is Phase.WAITING_USER
    description = await run.describe()
    assert description.raw_description.workflow_execution_info.first_run_id == description.run_id


async def test_a_failed_run_ends_the_exchange_with_a_run_error(api: Api) -> None:
    # Nothing scripted: the model answers 400, which fails the run at once.
    events = await exchange(api, "thread-fails", "hi")

    [error] = of_type(events, EventType.RUN_ERROR)
    assert events[-1] is error
    assert isinstance(error, RunErrorEvent)
    assert error.code == "LLM_HTTP_ERROR"


async def test_a_new_thread_without_a_user_message_ends_at_once_and_starts_no_run(
    api: Api,
) -> None:
    events = await agui_events(api, "thread-no-message")

    assert [e.type for e in events] == [EventType.RUN_STARTED, EventType.RUN_ERROR]
    assert isinstance(events[-1], RunErrorEvent)
    assert events[-1].code == "INPUT_EMPTY"
    missing = await api.http.get("/v1/runs/thread-no-message")
    assert missing.status_code == 404


async def test_a_thread_id_that_is_no_run_id_is_422_before_any_event(api: Api) -> None:
    for thread in ("t" * 1001, "thread/one", "thread-\u202eeno"):
        request = RunAgentInput(
            thread_id=thread,
            run_id="agui-bad-thread",
            messages=[UserMessage(id="u0", content="hi")],
        )

        response = await api.http.post(
            "/v1/agui", json=json.loads(request.model_dump_json(by_alias=True))
        )

        assert response.status_code == 422, thread
        assert response.json()["error"]["code"] == "RUN_ID_INVALID"


async def test_a_message_to_an_ended_thread_ends_the_exchange_with_a_run_error(api: Api) -> None:
    api.agent.model.add(say("first answer"))
    await exchange(api, "thread-ended", "hello")
    await api.http.post("/v1/runs/thread-ended/stop", json={})
    await api.run("thread-ended").result()

    events = await exchange(api, "thread-ended", "hello", "still there?")

    assert events[0].type == EventType.RUN_STARTED
    [error] = of_type(events, EventType.RUN_ERROR)
    assert events[-1] is error
    assert isinstance(error, RunErrorEvent)
    assert error.code == "RUN_ENDED"
