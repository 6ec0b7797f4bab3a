"""The HTTP API's routes, against a real dev server and worker over real HTTP: each
answers as the route table in docs/guides/http-api.md says, with Tarry's error codes."""

from __future__ import annotations

import asyncio
import gc
import json
import weakref
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from temporalio.client import Client
from temporalio.converter import DataConverter

from tarry.api import ApiServer, create_app
from tarry.api.errors import MAX_BODY_BYTES
from tarry.client import Tarry
from tarry.config.settings import TarrySettings
from tarry.contracts import (
    MAX_INPUT_BYTES,
    MAX_RUN_ID_LENGTH,
    RUN_ID_PATTERN,
    START_KEY_ATTRIBUTE,
    ErrorCode,
    Phase,
    WaitingFor,
)
from tarry.testing.scripted_model import call, say
from tests.cli import until_listed
from tests.conftest import tool_result
from tests.deadline import TIMEOUT, deadline
from tests.http_api import Access, Api, served

WRITE = {"path": "plan.md", "content": "ship it"}


def error_of(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["message"]
    return response.status_code, body["error"]["code"]


async def until_stopped(api: Api, run_id: str) -> dict[str, Any]:
    """The run's state once it waits for a person or has ended."""
    async with asyncio.timeout(deadline(30)):
        while True:
            state: dict[str, Any] = (await api.http.get(f"/v1/runs/{run_id}")).json()
            if state["phase"] != Phase.RUNNING:
                return state
            await asyncio.sleep(0.05)


async def gated(api: Api, **input: Any) -> str:
    """A run waiting for a decision on a gated `write_file` call `w1`; `input`: more of
    the run's input."""
    api.agent.model.add(call("write_file", WRITE, id="w1"), say("written"))
    run_id = await api.start("write the plan", require_approval=["write_file"], **input)
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.APPROVAL
    return run_id


async def listed(api: Api, query: str, expected: set[str]) -> set[str]:
    """The ids listed by `/v1/runs?query` among `expected`, once visibility has them
    all (it records a run's attributes a moment after the run sets them)."""
    async with asyncio.timeout(deadline(30)):
        while True:
            response = await api.http.get(f"/v1/runs?{query}&limit=1000")
            assert response.status_code == 200, response.text
            ids = {run["id"] for run in response.json()["runs"]}
            if expected <= ids:
                return ids
            await asyncio.sleep(0.2)


# --- Starting and finding runs ---------------------------------------------------------


async def test_a_start_retried_with_one_idempotency_key_starts_one_run(api: Api) -> None:
    api.agent.model.add(say("hello once"))
    key = {"Idempotency-Key": "start-7f3a"}

    first = await api.http.post("/v1/runs", json={"prompt": "hi"}, headers=key)
    second = await api.http.post("/v1/runs", json={"prompt": "hi"}, headers=key)

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"] == second.json()["id"]
    run = api.run(first.json()["id"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    assert len(api.agent.model.requests) == 1
    history = await api.agent.tarry.client.get_workflow_handle(run.id).describe()
    assert history.raw_description.workflow_execution_info.first_run_id == history.run_id


async def test_a_start_answers_the_run_s_id_and_first_state(api: Api) -> None:
    response = await api.http.post("/v1/runs", json={"id": "run-api-chosen"})
    api.run("run-api-chosen")

    assert response.status_code == 201
    assert response.json()["id"] == "run-api-chosen"
    assert response.json()["state"]["phase"] == Phase.WAITING_USER


async def test_runs_are_listed_by_phase_and_by_what_they_wait_for(api: Api) -> None:
    approval = await gated(api)
    api.agent.model.add(say("your turn"))
    reply = await api.start("hi")
    await until_stopped(api, reply)

    waiting = await listed(api, "phase=WaitingUser", {approval, reply})
    for_approval = await listed(api, "waiting_for=approval", {approval})
    response = await api.http.get("/v1/runs?phase=WaitingUser&waiting_for=approval&limit=1000")

    assert {approval, reply} <= waiting
    assert reply not in for_approval
    [row] = [r for r in response.json()["runs"] if r["id"] == approval]
    assert row["phase"] == Phase.WAITING_USER
    assert row["waiting_for"] == WaitingFor.APPROVAL
    assert row["summary"] == "write the plan"
    assert row["turns"] == 1
    assert row["model"] == "default"
    assert row["updated_at"]


async def test_the_run_list_pages_with_its_cursor(api: Api) -> None:
    started = {await api.start() for _ in range(3)}
    await listed(api, "phase=WaitingUser", started)

    first = (await api.http.get("/v1/runs?limit=2")).json()
    second = (await api.http.get(f"/v1/runs?limit=2&cursor={first['next_cursor']}")).json()

    assert len(first["runs"]) == 2
    assert first["next_cursor"]
    assert {r["id"] for r in first["runs"]}.isdisjoint({r["id"] for r in second["runs"]})


async def test_a_run_is_its_id_and_its_state(api: Api) -> None:
    api.agent.model.add(say("ready"))
    run_id = await api.start("hi")
    await until_stopped(api, run_id)

    response = await api.http.get(f"/v1/runs/{run_id}")

    body = response.json()
    assert response.status_code == 200
    assert body["id"] == run_id
    assert body["phase"] == Phase.WAITING_USER
    assert body["last_assistant_text"] == "ready"
    assert body["message_count"] == 2


async def test_the_transcript_is_read_a_page_at_a_time(api: Api) -> None:
    api.agent.model.add(call("list_files"), say("nothing here"))
    run_id = await api.start("look around")
    await until_stopped(api, run_id)

    first = (await api.http.get(f"/v1/runs/{run_id}/transcript?limit=2")).json()
    rest = (await api.http.get(f"/v1/runs/{run_id}/transcript?start=2")).json()

    assert [m["role"] for m in first["messages"]] == ["user", "assistant"]
    assert (first["start"], first["total"]) == (0, 4)
    assert [m["role"] for m in rest["messages"]] == ["tool", "assistant"]
    assert rest["messages"][-1]["content"] == "nothing here"


# --- Answering runs ----------------------------------------------------------------------


async def test_a_message_with_wait_answers_the_state_at_the_next_stop_point(api: Api) -> None:
    api.agent.model.add(say("first"), say("second"))
    run_id = await api.start("hi")
    await until_stopped(api, run_id)

    response = await api.http.post(f"/v1/runs/{run_id}/messages?wait=true", json={"text": "go on"})

    assert response.status_code == 200
    assert response.json()["last_assistant_text"] == "second"
    assert response.json()["phase"] == Phase.WAITING_USER


async def test_a_message_without_wait_is_accepted_and_answered_later(api: Api) -> None:
    api.agent.model.add(say("first"), say("second"))
    run_id = await api.start("hi")
    await until_stopped(api, run_id)

    response = await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": "go on"})

    assert (response.status_code, response.json()) == (202, {"accepted": True})
    async with asyncio.timeout(deadline(30)):
        while (await api.state(run_id)).last_assistant_text != "second":
            await asyncio.sleep(0.05)


async def test_a_message_retried_with_one_key_enters_the_transcript_once(api: Api) -> None:
    api.agent.model.add(say("first"), say("second"), say("third"))
    run_id = await api.start("hi")
    await until_stopped(api, run_id)
    key = {"Idempotency-Key": "reply-91c2"}

    first = await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": "once"}, headers=key)
    retried = await api.http.post(
        f"/v1/runs/{run_id}/messages?wait=true", json={"text": "once"}, headers=key
    )

    assert (first.status_code, retried.status_code) == (202, 200)
    transcript = await api.run(run_id).transcript()
    assert [m.content for m in transcript if m.role == "user"] == ["hi", "once"]
    assert len(api.agent.model.requests) == 2


async def test_a_blocking_answer_carries_the_run_s_event_offsets(api: Api) -> None:
    api.agent.model.add(say("first"), say("second"))
    run_id = await api.start("hi")
    await until_stopped(api, run_id)

    answered = await api.http.post(f"/v1/runs/{run_id}/messages?wait=true", json={"text": "more"})
    read = await api.http.get(f"/v1/runs/{run_id}")

    assert answered.json()["last_assistant_text"] == "second"
    assert answered.json()["events"] == read.json()["events"] > 0
    assert answered.json()["turn_events"] == read.json()["turn_events"] > 0


async def test_a_decision_answers_with_the_run_s_event_offsets(api: Api) -> None:
    run_id = await gated(api)

    decided = await api.http.post(f"/v1/runs/{run_id}/approvals", json={"approved": True})
    read = await api.http.get(f"/v1/runs/{run_id}")

    assert decided.json()["events"] == read.json()["events"] > 0


async def test_an_approval_answers_the_next_state_and_a_second_decision_is_409(
    api: Api,
) -> None:
    run_id = await gated(api)
    decision = {"call_id": "w1", "approved": True, "reason": None, "arguments": None}

    decided = await api.http.post(f"/v1/runs/{run_id}/approvals", json=decision)
    again = await api.http.post(f"/v1/runs/{run_id}/approvals", json=decision)

    assert decided.status_code == 200
    assert decided.json()["last_assistant_text"] == "written"
    assert (api.agent.workspace_root / run_id / "plan.md").read_text() == "ship it"
    assert error_of(again) == (409, ErrorCode.APPROVAL_ALREADY_DECIDED)


async def test_a_call_id_the_model_repeats_names_the_pending_call_not_the_decided_one(
    api: Api,
) -> None:
    api.agent.model.add(
        call("write_file", WRITE, id="w1"),
        call("write_file", {"path": "b.md", "content": "again"}, id="w1"),
        say("written twice"),
    )
    run_id = await api.start("write the plans", require_approval=["write_file"])
    await until_stopped(api, run_id)
    first = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"call_id": "w1", "approved": True}
    )
    [pending] = first.json()["pending_approvals"]

    second = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"call_id": pending["call_id"], "approved": True}
    )

    assert first.status_code == 200, first.text
    assert pending["call_id"] != "w1"
    assert pending["arguments"]["path"] == "b.md"
    assert second.status_code == 200, second.text
    assert (await until_stopped(api, run_id))["last_assistant_text"] == "written twice"


async def test_a_pending_call_s_arguments_are_the_object_a_decision_sends_back(
    api: Api,
) -> None:
    run_id = await gated(api)
    [pending] = (await api.http.get(f"/v1/runs/{run_id}")).json()["pending_approvals"]
    edited = {**pending["arguments"], "content": "ship it today"}

    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals",
        json={"call_id": pending["call_id"], "approved": True, "arguments": edited},
    )

    assert pending["arguments"] == WRITE
    assert json.loads(pending["arguments_text"]) == WRITE
    assert decided.status_code == 200, decided.text
    assert (api.agent.workspace_root / run_id / "plan.md").read_text() == "ship it today"


async def test_a_rejection_with_a_reason_is_told_to_the_model(api: Api) -> None:
    run_id = await gated(api)

    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals",
        json={"call_id": "w1", "approved": False, "reason": "not today"},
    )

    assert decided.status_code == 200
    tool_message = (await api.run(run_id).transcript())[2]
    assert "not today" in tool_result(tool_message)["error"]["message"]


async def test_pause_is_accepted_and_the_run_waits_at_its_next_turn_boundary(
    api: Api,
) -> None:
    api.agent.model.add(call("list_files", {}, delay=1.0), say("never asked"))
    run_id = await api.start("look around")
    await api.agent.model.wait_for_requests(1, timeout=deadline(10))

    response = await api.http.post(f"/v1/runs/{run_id}/pause", json={})

    assert (response.status_code, response.json()) == (202, {"accepted": True})
    state = await until_stopped(api, run_id)
    assert (state["phase"], state["turn"]) == (Phase.WAITING_USER, 1)
    assert len(api.agent.model.requests) == 1


async def test_raising_the_budget_of_a_run_waiting_for_it_lets_it_go_on(api: Api) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    api.agent.model.add(call("list_files", id="c1", usage=usage), say("Three files."))
    run_id = await api.start("look around", budget={"max_total_tokens": 100})
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.BUDGET

    too_low = await api.http.post(f"/v1/runs/{run_id}/budget", json={"max_total_tokens": 110})
    raised = await api.http.post(f"/v1/runs/{run_id}/budget", json={"max_total_tokens": 1000})

    assert error_of(too_low) == (422, ErrorCode.BUDGET_INVALID)
    assert raised.status_code == 200, raised.text
    assert raised.json()["last_assistant_text"] == "Three files."
    assert raised.json()["waiting_for"] == WaitingFor.INPUT


async def test_stop_is_accepted_and_ends_a_waiting_run_with_its_reason(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(f"/v1/runs/{run_id}/stop", json={"reason": "done for today"})

    assert (response.status_code, response.json()) == (202, {"accepted": True})
    result = await api.run(run_id).result()
    assert (result.phase, result.stop_reason) == (Phase.COMPLETED, "done for today")


# --- Errors ----------------------------------------------------------------------------


async def test_an_unknown_run_is_404_run_not_found(api: Api) -> None:
    for response in (
        await api.http.get("/v1/runs/run-nosuch"),
        await api.http.post("/v1/runs/run-nosuch/messages", json={"text": "hi"}),
        await api.http.get("/v1/runs/run-nosuch/events"),
    ):
        assert error_of(response) == (404, ErrorCode.RUN_NOT_FOUND)


async def test_a_message_to_an_ended_run_is_409_run_ended(api: Api) -> None:
    run_id = await api.start()
    await api.http.post(f"/v1/runs/{run_id}/stop", json={})
    await api.run(run_id).result()

    response = await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": "hello?"})

    assert error_of(response) == (409, ErrorCode.RUN_ENDED)


async def test_a_start_with_the_id_of_a_running_run_is_409_run_exists(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post("/v1/runs", json={"id": run_id})

    assert error_of(response) == (409, ErrorCode.RUN_EXISTS)


async def test_a_start_with_the_id_of_an_ended_run_is_409_and_its_transcript_stays(
    api: Api,
) -> None:
    api.agent.model.add(say("first conversation"))
    run_id = await api.start("hello")
    await until_stopped(api, run_id)
    await api.http.post(f"/v1/runs/{run_id}/stop", json={})
    await api.run(run_id).result()
    before = (await api.http.get(f"/v1/runs/{run_id}/transcript")).json()["messages"]

    plain = await api.http.post("/v1/runs", json={"id": run_id, "prompt": "a new one"})
    keyed = await api.http.post(
        "/v1/runs", json={"id": run_id, "prompt": "a new one"}, headers={"Idempotency-Key": "k1"}
    )

    assert error_of(plain) == (409, ErrorCode.RUN_EXISTS)
    assert error_of(keyed) == (409, ErrorCode.RUN_EXISTS)
    after = (await api.http.get(f"/v1/runs/{run_id}/transcript")).json()["messages"]
    assert after == before
    assert [m["content"] for m in after] == ["hello", "first conversation"]


async def test_resume_goes_on_with_an_ended_run_under_its_id(api: Api) -> None:
    run_id = await api.start()
    await api.http.post(f"/v1/runs/{run_id}/stop", json={"reason": "later"})
    await api.run(run_id).result()

    response = await api.http.post(f"/v1/runs/{run_id}/resume", json={})

    assert response.status_code == 200, response.text
    assert (response.json()["id"], response.json()["phase"]) == (run_id, Phase.WAITING_USER)
    assert error_of(await api.http.post(f"/v1/runs/{run_id}/resume", json={})) == (
        409,
        ErrorCode.RUN_NOT_ENDED,
    )


async def test_an_idempotency_key_sent_again_with_another_body_is_422_and_starts_nothing(
    api: Api,
) -> None:
    api.agent.model.add(say("hello once"))
    key = {"Idempotency-Key": "start-reused"}
    first = await api.http.post("/v1/runs", json={"prompt": "hi"}, headers=key)
    run = api.run(first.json()["id"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)

    other = await api.http.post("/v1/runs", json={"prompt": "something else"}, headers=key)
    same = await api.http.post("/v1/runs", json={"prompt": "hi"}, headers=key)

    assert error_of(other) == (422, ErrorCode.IDEMPOTENCY_KEY_REUSED)
    assert (same.status_code, same.json()["id"]) == (201, run.id)
    assert [m.content for m in await run.transcript()] == ["hi", "hello once"]


async def test_one_idempotency_key_with_two_ids_starts_one_run(api: Api) -> None:
    key = {"Idempotency-Key": "start-two-ids"}
    first = await api.http.post("/v1/runs", json={"id": "run-key-a"}, headers=key)
    retried = await api.http.post("/v1/runs", json={"id": "run-key-a"}, headers=key)
    second = await api.http.post("/v1/runs", json={"id": "run-key-b"}, headers=key)
    api.run("run-key-a")

    assert (first.status_code, retried.status_code) == (201, 201)
    assert error_of(second) == (422, ErrorCode.IDEMPOTENCY_KEY_REUSED)
    assert "'run-key-a'" in second.json()["error"]["message"]
    assert error_of(await api.http.get("/v1/runs/run-key-b")) == (404, ErrorCode.RUN_NOT_FOUND)


async def test_one_idempotency_key_with_two_ids_starts_one_run_across_api_processes(
    api: Api, api_access: Access
) -> None:
    key = {"Idempotency-Key": "start-two-servers"}
    first = await api.http.post("/v1/runs", json={"id": "run-served-a"}, headers=key)
    run = api.run("run-served-a")
    # Another API process knows the key from Temporal's visibility, once it lists the run.
    await until_listed(api.agent.tarry.client, f"{START_KEY_ATTRIBUTE.name} IS NOT NULL", run.id)

    async with served(api.agent, api_access) as other:
        second = await other.http.post("/v1/runs", json={"id": "run-served-b"}, headers=key)
        retried = await other.http.post("/v1/runs", json={"id": "run-served-a"}, headers=key)

    assert first.status_code == 201
    assert error_of(second) == (422, ErrorCode.IDEMPOTENCY_KEY_REUSED)
    assert "'run-served-a'" in second.json()["error"]["message"]
    assert (retried.status_code, retried.json()["id"]) == (201, run.id)
    assert error_of(await api.http.get("/v1/runs/run-served-b")) == (404, ErrorCode.RUN_NOT_FOUND)


async def test_a_retried_start_is_known_after_continue_as_new_and_resume(api: Api) -> None:
    api.agent.model.add(say("one"), say("two"))
    key = {"Idempotency-Key": "start-long-lived"}
    body = {"prompt": "hi", "continue_as_new_after_turns": 1}
    first = await api.http.post("/v1/runs", json=body, headers=key)
    run = api.run(first.json()["id"])
    await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
    await run.send("again")
    handed_over = (await run.describe()).raw_description.workflow_execution_info
    await api.http.post(f"/v1/runs/{run.id}/stop", json={})
    await run.result()
    await api.http.post(f"/v1/runs/{run.id}/resume", json={})

    retried = await api.http.post("/v1/runs", json=body, headers=key)
    changed = await api.http.post("/v1/runs", json={**body, "prompt": "ho"}, headers=key)

    assert handed_over.first_run_id != handed_over.execution.run_id  # a continue-as-new
    assert (retried.status_code, retried.json()["id"]) == (201, run.id)
    assert error_of(changed) == (422, ErrorCode.IDEMPOTENCY_KEY_REUSED)


BAD_IDS = {
    "empty": "",
    "201 characters": "r" * 201,
    "1001 characters": "r" * 1001,
    "a slash": "run/one",
    "dot dot": "..",
    "a control character": "run\x07one",
    "a right-to-left override": "run-\u202eeno",
}


@pytest.mark.parametrize("bad_id", BAD_IDS.values(), ids=BAD_IDS.keys())
async def test_a_start_with_a_bad_id_is_422_run_id_invalid(api: Api, bad_id: str) -> None:
    response = await api.http.post("/v1/runs", json={"id": bad_id, "prompt": "hi"})

    assert error_of(response) == (422, ErrorCode.RUN_ID_INVALID)


PATH_BAD_IDS = {name: bad for name, bad in BAD_IDS.items() if bad}
"""An empty id in a path is no id: `/v1/runs/` is the run list's path."""


@pytest.mark.parametrize("bad_id", PATH_BAD_IDS.values(), ids=PATH_BAD_IDS.keys())
async def test_a_bad_id_in_the_path_is_refused_at_the_door(api: Api, bad_id: str) -> None:
    # Percent-encoded, so that the id reaches the server as it is (`/` and `..` too).
    path = f"/v1/runs/{quote(bad_id, safe='')}"

    read = await api.http.get(path)
    stopped = await api.http.post(f"{path}/stop", json={})

    for response in (read, stopped):
        status, code = error_of(response)
        assert 400 <= status < 500
        assert code in {ErrorCode.RUN_ID_INVALID, "NOT_FOUND", "METHOD_NOT_ALLOWED"}


async def test_an_id_in_the_path_breaking_the_rule_is_422_run_id_invalid(api: Api) -> None:
    for bad_id in ("r" * 1001, "run\x07one", "run-\u202eeno", ".hidden"):
        response = await api.http.get(f"/v1/runs/{quote(bad_id, safe='')}/transcript")

        assert error_of(response) == (422, ErrorCode.RUN_ID_INVALID), bad_id


async def test_a_forged_cursor_is_422_input_invalid(api: Api) -> None:
    for forged in ("garbage", "Z2FyYmFnZQ==", "eyJDbG9zZVRpbWUiOiJiYWQifQ=="):
        response = await api.http.get(f"/v1/runs?cursor={forged}")

        assert error_of(response) == (422, ErrorCode.INPUT_INVALID), forged


@pytest.mark.parametrize(
    ("headers", "content"),
    [
        ({"Content-Type": "text/plain"}, b""),
        ({"Content-Type": "application/x-www-form-urlencoded"}, b""),
        ({"Content-Type": "application/x-www-form-urlencoded"}, b"reason=x"),
        ({"Content-Type": "multipart/form-data; boundary=b"}, b"--b--\r\n"),
        ({}, b""),
    ],
    ids=["empty text", "empty form", "form", "multipart", "no content type"],
)
async def test_stop_and_pause_take_only_json_so_a_cross_site_form_changes_nothing(
    api: Api, headers: dict[str, str], content: bytes
) -> None:
    run_id = await api.start()

    for action in ("stop", "pause"):
        response = await api.http.post(
            f"/v1/runs/{run_id}/{action}", content=content, headers=headers
        )

        assert error_of(response) == (415, "UNSUPPORTED_MEDIA_TYPE")
    state = await api.state(run_id)
    assert (state.phase, state.waiting_for) == (Phase.WAITING_USER, WaitingFor.INPUT)


async def test_an_empty_body_sent_as_json_stops_a_run(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(
        f"/v1/runs/{run_id}/stop", headers={"Content-Type": "application/json"}
    )

    assert response.status_code == 202, response.text
    assert (await api.run(run_id).result()).phase is Phase.COMPLETED


async def test_a_start_sent_as_a_form_is_415_and_starts_nothing(api: Api) -> None:
    response = await api.http.post(
        "/v1/runs", content=b'{"id": "run-from-a-form"}', headers={"Content-Type": "text/plain"}
    )

    assert error_of(response) == (415, "UNSUPPORTED_MEDIA_TYPE")
    assert error_of(await api.http.get("/v1/runs/run-from-a-form")) == (
        404,
        ErrorCode.RUN_NOT_FOUND,
    )


async def test_a_method_a_path_does_not_take_is_405_with_allow(api: Api) -> None:
    runs = await api.http.delete("/v1/runs")
    stop = await api.http.get("/v1/runs/run-x/stop")

    assert error_of(runs) == (405, "METHOD_NOT_ALLOWED")
    assert set(runs.headers["Allow"].split(", ")) == {"GET", "POST"}
    assert error_of(stop) == (405, "METHOD_NOT_ALLOWED")
    assert stop.headers["Allow"] == "POST"


async def test_a_budget_body_naming_no_limit_is_422(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(f"/v1/runs/{run_id}/budget", json={})

    assert error_of(response) == (422, ErrorCode.INPUT_INVALID)


async def test_a_boolean_is_no_number_and_infinity_no_limit(api: Api) -> None:
    """Lax types made `true` a budget of $1 and a fork at message 1, and `1e309` (JSON
    for infinity) a budget that never ends."""
    run_id = await api.start()
    json_body = {"Content-Type": "application/json"}

    refusals = {
        "budget true": await api.http.post(
            f"/v1/runs/{run_id}/budget", json={"max_cost_usd": True}
        ),
        "tokens true": await api.http.post(
            f"/v1/runs/{run_id}/budget", json={"max_total_tokens": True}
        ),
        "budget 1e309": await api.http.post(
            f"/v1/runs/{run_id}/budget", content=b'{"max_cost_usd": 1e309}', headers=json_body
        ),
        "start 1e309": await api.http.post(
            "/v1/runs", content=b'{"budget": {"max_cost_usd": 1e309}}', headers=json_body
        ),
        "turns true": await api.http.post("/v1/runs", json={"max_turns": True}),
        "fork at true": await api.http.post(f"/v1/runs/{run_id}/fork", json={"at": True}),
    }

    for what, response in refusals.items():
        assert error_of(response) == (422, ErrorCode.INPUT_INVALID), what
    assert (await api.state(run_id)).budget is None


async def test_a_decision_with_nothing_pending_is_409(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(f"/v1/runs/{run_id}/approvals", json={"approved": True})

    assert error_of(response) == (409, ErrorCode.APPROVAL_NOTHING_PENDING)


async def test_an_empty_message_is_422_input_empty(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(f"/v1/runs/{run_id}/messages", json={"text": "  "})

    assert error_of(response) == (422, ErrorCode.INPUT_EMPTY)


async def test_a_body_that_breaks_the_schema_is_422_input_invalid(api: Api) -> None:
    response = await api.http.post("/v1/runs", json={"prompt": "hi", "max_turns": 0})

    status, code = error_of(response)
    assert (status, code) == (422, ErrorCode.INPUT_INVALID)
    assert "max_turns" in response.json()["error"]["message"]


async def test_a_start_naming_an_unknown_tool_is_409_tool_not_found_and_starts_nothing(
    api: Api,
) -> None:
    response = await api.http.post("/v1/runs", json={"id": "run-typo", "tools": ["raed_file"]})

    assert error_of(response) == (409, ErrorCode.TOOL_NOT_FOUND)
    assert error_of(await api.http.get("/v1/runs/run-typo")) == (404, ErrorCode.RUN_NOT_FOUND)


async def test_a_reply_over_the_limit_is_413_input_too_large(api: Api) -> None:
    run_id = await api.start()

    response = await api.http.post(
        f"/v1/runs/{run_id}/messages", json={"text": "x" * (MAX_INPUT_BYTES + 1)}
    )

    assert error_of(response) == (413, ErrorCode.INPUT_TOO_LARGE)


async def unfinished_post(api: Api, headers: bytes, body: bytes) -> tuple[bytes, Any]:
    """POSTs `body` with `headers` over a raw connection, never finishing the body, and
    returns the status line and the JSON that came back anyway."""
    host, port = api.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"POST /v1/runs/run-any/messages HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
    writer.write(b"Content-Type: application/json\r\n" + headers + b"\r\n" + body)
    await writer.drain()
    async with asyncio.timeout(deadline(30)):
        head = await reader.readuntil(b"\r\n\r\n")
        answer = await reader.read(1000)
    writer.close()
    return head.split(b"\r\n")[0], json.loads(answer)


async def test_a_body_over_the_cap_is_refused_before_it_is_read_whole(api: Api) -> None:
    # Chunked: no length to check first, so the server must count as it reads.
    chunk = b"x" * 65536
    chunks = b"%x\r\n%s\r\n" % (len(chunk), chunk) * (MAX_BODY_BYTES // len(chunk) + 2)

    status, answer = await unfinished_post(api, b"Transfer-Encoding: chunked\r\n", chunks)

    assert status == b"HTTP/1.1 413 Request Entity Too Large"
    assert answer["error"]["code"] == ErrorCode.INPUT_TOO_LARGE


async def test_a_declared_length_over_the_cap_is_refused_before_any_body(api: Api) -> None:
    length = b"Content-Length: %d\r\n" % (MAX_BODY_BYTES + 1)

    status, answer = await unfinished_post(api, length, b"")

    assert status == b"HTTP/1.1 413 Request Entity Too Large"
    assert answer["error"]["code"] == ErrorCode.INPUT_TOO_LARGE


# --- Health and docs ---------------------------------------------------------------------


async def test_healthz_is_200_while_temporal_answers(api: Api) -> None:
    response = await api.http.get("/healthz")

    assert (response.status_code, response.json()) == (200, {"temporal": "reachable"})


async def test_the_openapi_document_describes_every_route(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    docs = await api.http.get("/docs")

    assert set(document["paths"]) == {
        "/v1/runs",
        "/v1/runs/{run_id}",
        "/v1/runs/{run_id}/transcript",
        "/v1/runs/{run_id}/timeline",
        "/v1/runs/{run_id}/messages",
        "/v1/runs/{run_id}/approvals",
        "/v1/runs/{run_id}/budget",
        "/v1/runs/{run_id}/retry",
        "/v1/runs/{run_id}/model",
        "/v1/runs/{run_id}/reply-policy",
        "/v1/runs/{run_id}/pins",
        "/v1/runs/{run_id}/pause",
        "/v1/runs/{run_id}/stop",
        "/v1/runs/{run_id}/resume",
        "/v1/runs/{run_id}/fork",
        "/v1/runs/{run_id}/events",
        "/v1/schedules",
        "/v1/schedules/{name}",
        "/v1/schedules/{name}/pause",
        "/v1/schedules/{name}/unpause",
        "/v1/schedules/{name}/trigger",
        "/v1/agui",
        "/v1/audit",
        "/v1/datasets",
        "/v1/datasets/{dataset}",
        "/v1/datasets/{dataset}/points",
        "/v1/evals/{eval_id}",
        "/v1/wait-kinds",
        "/v1/limits/{user}/raise",
        "/v1/search",
        "/v1/memories",
        "/v1/memories/{memory_id}",
        "/v1/usage",
        "/v1/oauth/connect/{run_id}/{server}",
        "/v1/oauth/callback",
        "/v1/a2a/push/{run_id}/{call}",
        "/v1/connections",
        "/v1/connections/{server}",
        "/v1/me",
        "/v1/actions/{token}",
        "/healthz",
    }
    assert "RunInput" in str(document["components"]["schemas"]["StartRequest"]) or (
        "prompt" in document["components"]["schemas"]["StartRequest"]["properties"]
    )
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()


async def test_the_openapi_document_states_what_the_server_checks(api: Api) -> None:
    document = (await api.http.get("/openapi.json")).json()
    paths, schemas = document["paths"], document["components"]["schemas"]

    [run_id_parameter] = paths["/v1/runs/{run_id}"]["get"]["parameters"]
    run_id = run_id_parameter["schema"]
    start = paths["/v1/runs"]["post"]
    events = {p["name"]: p for p in paths["/v1/runs/{run_id}/events"]["get"]["parameters"]}
    thread = schemas["AguiInput"]["properties"]["threadId"]

    assert (run_id["pattern"], run_id["maxLength"]) == (RUN_ID_PATTERN, MAX_RUN_ID_LENGTH)
    assert thread["pattern"] == RUN_ID_PATTERN
    assert {"idempotency-key"} == {p["name"] for p in start["parameters"]}
    assert {"409", "415", "422"} <= set(start["responses"])
    assert "last-event-id" in events
    assert len(schemas["BudgetRequest"]["anyOf"]) == 2
    assert paths["/v1/runs/{run_id}/stop"]["post"]["requestBody"]["required"] is True
    # A run's input and its parts refuse a field they do not know: the document says so.
    for closed in ("StartRequest", "RunInput", "Budget", "Timeouts", "Sampling"):
        assert schemas[closed]["additionalProperties"] is False, closed
    assert schemas["ForkRequest"]["properties"]["at"]["minimum"] == 0


async def unreachable_tarry(converter: DataConverter) -> Tarry:
    """A client of a Temporal that never answers: nothing listens on port 1, and a lazy
    client connects only when asked something."""
    return Tarry(await Client.connect("127.0.0.1:1", lazy=True, data_converter=converter))


async def test_a_route_is_503_temporal_unavailable_when_temporal_does_not_answer(
    converter: DataConverter,
) -> None:
    unreachable = await unreachable_tarry(converter)
    app = create_app(unreachable, TarrySettings.model_construct())
    async with ApiServer(app, "127.0.0.1", 0) as server, httpx.AsyncClient() as http:
        listed = await http.get(f"{server.url}/v1/runs")
        read = await http.get(f"{server.url}/v1/runs/run-1/transcript")

    for response in (listed, read):
        assert error_of(response) == (503, ErrorCode.TEMPORAL_UNAVAILABLE)
        assert response.headers["retry-after"] == "1"


async def test_healthz_is_503_when_temporal_does_not_answer(converter: DataConverter) -> None:
    unreachable = await unreachable_tarry(converter)
    app = create_app(unreachable, TarrySettings.model_construct())
    async with ApiServer(app, "127.0.0.1", 0) as server, httpx.AsyncClient() as http:
        response = await http.get(f"{server.url}/healthz")

    assert (response.status_code, response.json()) == (503, {"temporal": "unreachable"})


async def test_an_app_that_served_is_freed_once_dropped_with_what_it_was_made_of(
    temporal: Client,
) -> None:
    # FastAPI keeps what it learnt of every endpoint and dependency function (4,096 of
    # them): one closing over its app, or over what the app was made of, would keep it
    # after the app is dropped, and a process making many apps would grow without end.
    tarry = Tarry(temporal, "unused")
    app = create_app(tarry, TarrySettings.model_construct())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        for path in ("/openapi.json", "/healthz", "/v1/runs", "/v1/schedules"):
            assert (await http.get(path)).status_code == 200, path
    dropped: dict[str, weakref.ref[Any]] = {
        "app": weakref.ref(app),
        "its Tarry": weakref.ref(tarry),
    }

    del app, tarry, transport, http  # the client holds its transport, which holds the app
    gc.collect()

    assert [name for name, ref in dropped.items() if ref() is not None] == []
