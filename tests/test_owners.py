"""Runs belong to people: with users named, each finds and uses their own runs, those
shared with them (`RunInput.share`) and those they approve calls of; admins use every
run (`tarry.core.ownership`). Every door enforces it, so the sweeps here are generated from
the API's own OpenAPI document: a route added tomorrow that names a run or a schedule
is swept without a new test."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from ag_ui.core import RunAgentInput, UserMessage

from tarry.api import ApiServer, create_app
from tarry.client.evals import start_eval, wait_report
from tarry.config.settings import load_settings
from tarry.contracts import ErrorCode, EvalInput, WaitingFor
from tarry.core.identities import Caller
from tarry.core.ownership import Policy, RunAccess, Visibility
from tarry.testing.scripted_model import ScriptedToolCall, call, calls, say
from tests.conftest import Agent
from tests.deadline import deadline
from tests.eval_dataset import agree_on_three
from tests.eval_dataset import points as labelled_points
from tests.http_api import Api, api_client
from tests.test_http_api import WRITE, error_of, listed, until_stopped
from tests.test_http_api_people import as_
from tests.test_sub_agents import PLANNER, child_of, plan_the_launch, until

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
CAROL = "carol-token-0123456789"
DAVE = "dave-token-0123456789a"
ERIN = "erin-token-0123456789a"
FRANK = "frank-token-0123456789"

CONFIG = f"""
[api]
admins = ["group:admins"]

[api.users]
alice = "{ALICE}"
bob = "{BOB}"
carol = "{CAROL}"
dave = "{DAVE}"
erin = "{ERIN}"
frank = "{FRANK}"

[api.groups]
admins = ["erin"]
"""
"""Private by default, since users are named: carol is shared alice's run to read,
dave approves its calls, erin is an admin, bob is nobody to it; frank is nobody to
any run of the session's other tests either (they share its server), so what he lists
is only what a test gives him."""

READS = frozenset({"get", "head"})


def with_people(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes `CONFIG` the configuration the API is made with."""
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("TARRY_CONFIG", str(config))


@asynccontextmanager
async def people_api(agent: Agent) -> AsyncIterator[Api]:
    """The API with `CONFIG`'s people (`with_people`); its requests are alice's unless
    they send another token."""
    async with (
        ApiServer(create_app(agent.tarry, load_settings()), "127.0.0.1", 0) as server,
        api_client(server.url, ALICE, timeout=deadline(60)) as http,
    ):
        yield Api(http, agent, server.url)


@pytest.fixture
async def api(agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    with_people(tmp_path, monkeypatch)
    async with people_api(agent) as api:
        yield api


def agui_body(thread_id: str) -> dict[str, Any]:
    """An AG-UI request's body: a user's message to thread (run) `thread_id`."""
    request = RunAgentInput(
        thread_id=thread_id,
        run_id=f"agui-{uuid.uuid4().hex[:6]}",
        state=None,
        messages=[UserMessage(id="u1", content="let me in")],
        tools=[],
        context=[],
        forwarded_props=None,
    )
    body: dict[str, Any] = json.loads(request.model_dump_json(by_alias=True))
    return body


async def alices_run(api: Api) -> str:
    """Alice's run, shared with carol to read, whose gated `write_file` call `w1` dave
    approves, waiting for that decision."""
    api.agent.model.add(call("write_file", WRITE, id="w1"), say("written"))
    run_id = await api.start(
        "write the plan",
        require_approval=["write_file"],
        share={"carol": "read"},
        approvers={"write_file": ["dave"]},
    )
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.APPROVAL
    return run_id


async def routes(api: Api, parameter: str) -> list[tuple[str, str]]:
    """(method, path) of every route of the API's OpenAPI document whose path takes
    `parameter`."""
    document = (await api.http.get("/openapi.json")).json()
    return [
        (method, path)
        for path, operations in document["paths"].items()
        if f"{{{parameter}}}" in path
        for method in operations
    ]


async def ask(api: Api, method: str, path: str, token: str) -> httpx.Response:
    """`method` on `path` as `token`'s user, with an empty JSON body for a change; a
    stream (the run's events) is answered by its status alone, then left."""
    body: dict[str, Any] | None = None if method in READS else {}
    request = api.http.build_request(method.upper(), path, json=body, headers=as_(token))
    response = await api.http.send(request, stream=True)
    await (response.aread() if response.status_code >= 300 else response.aclose())
    return response


async def test_routes_that_name_a_run_are_found_in_the_openapi_document(api: Api) -> None:
    named = await routes(api, "run_id")
    assert ("get", "/v1/runs/{run_id}/events") in named
    assert ("post", "/v1/runs/{run_id}/approvals") in named
    assert ("get", "/v1/runs/{run_id}/timeline") in named
    assert len(named) >= 12


CONNECT = "/v1/oauth/connect/{run_id}/{server}"
"""A connect to an OAuth server is the person's the run waits for, and no one else's: a
reader or an admin of the run is refused it (`CONNECT_REFUSED`, `tests/test_oauth.py`)."""


PUSH = "/v1/a2a/push/{run_id}/{call}"
"""A remote A2A agent's push: its call's token (the workers' HMAC) is its guard, not a
person's rights, so it refuses everyone without it alike (`tests/test_a2a_remote.py`)."""


def at(path: str, run_id: str) -> str:
    """`path` with `run_id`, a server for a connect's and a call for a push's."""
    return path.format(run_id=run_id, server="tickets", call="LEAD:researcher-1")


def pushed_without_its_token(response: httpx.Response) -> bool:
    return error_of(response) == (403, ErrorCode.A2A_PUSH_REFUSED)


async def test_another_user_s_private_run_is_404_on_every_route_that_names_it(api: Api) -> None:
    run_id = await alices_run(api)

    for method, path in await routes(api, "run_id"):
        response = await ask(api, method, at(path, run_id), BOB)
        if path == PUSH:
            assert pushed_without_its_token(response), response.text
            continue
        assert error_of(response) == (404, ErrorCode.RUN_NOT_FOUND), (method, path)
        unknown = await ask(api, method, at(path, "run-nobody-has"), BOB)
        assert response.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
            "run-nobody-has", run_id
        ), "a hidden run answers as one that does not exist"

    assert (await api.state(run_id)).waiting_for == WaitingFor.APPROVAL


async def test_a_read_share_reads_every_route_and_is_403_on_every_change(api: Api) -> None:
    run_id = await alices_run(api)

    for method, path in await routes(api, "run_id"):
        response = await ask(api, method, at(path, run_id), CAROL)
        if path == CONNECT:
            assert error_of(response) == (403, ErrorCode.CONNECT_REFUSED), method
        elif path == PUSH:
            assert pushed_without_its_token(response), response.text
        elif method in READS:
            assert response.status_code == 200, (method, path, response.text)
        else:
            assert error_of(response) == (403, ErrorCode.NOT_ALLOWED), (method, path)
            assert "carol" in response.json()["error"]["message"]
            assert "write" in response.json()["error"]["message"]

    view = (await api.http.get(f"/v1/runs/{run_id}", headers=as_(CAROL))).json()
    assert view["may_write"] is False
    assert [p["may_decide"] for p in view["pending_approvals"]] == [False]
    state = await api.state(run_id)
    assert (state.waiting_for, state.message_count) == (WaitingFor.APPROVAL, 2)


async def test_an_admin_is_refused_on_no_route_that_names_a_run(api: Api) -> None:
    run_id = await alices_run(api)
    view = (await api.http.get(f"/v1/runs/{run_id}", headers=as_(ERIN))).json()
    assert (view["may_write"], view["pending_approvals"][0]["may_decide"]) == (True, False)

    stopped = await api.http.post(f"/v1/runs/{run_id}/stop", json={}, headers=as_(ERIN))
    assert stopped.status_code == 202
    assert (await until_stopped(api, run_id))["stopped_by"] == "erin"

    refusals = {}
    for method, path in await routes(api, "run_id"):
        response = await ask(api, method, at(path, run_id), ERIN)
        if path == CONNECT:
            assert error_of(response) == (403, ErrorCode.CONNECT_REFUSED), method
        elif path == PUSH:
            assert pushed_without_its_token(response), response.text
        elif response.status_code in (403, 404):
            refusals[(method, path)] = response.text
    assert refusals == {}


async def test_an_approver_reads_the_run_and_decides_its_call_but_changes_nothing_else(
    api: Api,
) -> None:
    run_id = await alices_run(api)

    view = (await api.http.get(f"/v1/runs/{run_id}", headers=as_(DAVE))).json()
    assert view["may_write"] is False
    assert [p["may_decide"] for p in view["pending_approvals"]] == [True]
    reply = await api.http.post(
        f"/v1/runs/{run_id}/messages", json={"text": "hi"}, headers=as_(DAVE)
    )
    assert error_of(reply) == (403, ErrorCode.NOT_ALLOWED)
    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"call_id": "w1", "approved": True}, headers=as_(DAVE)
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["may_write"] is False
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.INPUT


async def test_the_run_list_of_each_user_holds_only_the_runs_they_may_read(api: Api) -> None:
    alices = await alices_run(api)
    api.agent.model.add(say("bob's answer"))
    bobs_response = await api.http.post(
        "/v1/runs", json={"prompt": "bob's question"}, headers=as_(BOB)
    )
    bobs = bobs_response.json()["id"]
    api.run(bobs)

    assert alices in await listed(api, "", {alices})
    for token, expected in ((CAROL, {alices}), (DAVE, {alices}), (ERIN, {alices, bobs})):
        api.http.headers.update(as_(token))
        assert expected <= await listed(api, "", expected)
    api.http.headers.update(as_(BOB))
    seen_by_bob = await listed(api, "", {bobs})

    assert alices not in seen_by_bob
    alices_all = {
        r["id"]
        for r in (await api.http.get("/v1/runs?limit=1000", headers=as_(ALICE))).json()["runs"]
    }
    assert bobs not in alices_all
    franks = (await api.http.get("/v1/runs?limit=1000", headers=as_(FRANK))).json()["runs"]
    assert franks == []


async def test_the_event_stream_and_ag_ui_of_another_user_s_run_refuse_them(api: Api) -> None:
    run_id = await alices_run(api)
    body = agui_body(run_id)

    for token, refused in (
        (BOB, (404, ErrorCode.RUN_NOT_FOUND)),
        (CAROL, (403, ErrorCode.NOT_ALLOWED)),
    ):
        agui = await api.http.post("/v1/agui", json=body, headers=as_(token))
        assert error_of(agui) == refused
    events = await ask(api, "get", f"/v1/runs/{run_id}/events", BOB)
    assert error_of(events) == (404, ErrorCode.RUN_NOT_FOUND)

    state = await api.state(run_id)
    assert (state.waiting_for, state.message_count) == (WaitingFor.APPROVAL, 2)


async def test_another_user_s_schedule_is_404_on_every_route_and_missing_from_their_list(
    api: Api,
) -> None:
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    created = await api.http.post(
        "/v1/schedules",
        json={
            "name": name,
            "every": "1h",
            "input": {"prompt": "report", "share": {"carol": "read"}},
        },
    )
    assert created.status_code == 201, created.text
    try:
        for method, path in await routes(api, "name"):
            response = await ask(api, method, path.format(name=name), BOB)
            assert error_of(response) == (404, ErrorCode.SCHEDULE_NOT_FOUND), (method, path)
            if method not in READS:
                refused = await ask(api, method, path.format(name=name), CAROL)
                assert error_of(refused) == (403, ErrorCode.NOT_ALLOWED), (method, path)

        async def names(token: str) -> set[str]:
            listing = await api.http.get("/v1/schedules", headers=as_(token))
            return {s["name"] for s in listing.json()["schedules"]}

        assert name in await _eventually(lambda: names(CAROL), name)
        assert name not in await names(BOB)
    finally:
        await api.http.delete(f"/v1/schedules/{name}")


async def _eventually(read: Callable[[], Awaitable[set[str]]], member: str) -> set[str]:
    """`read()`'s set once it holds `member`: visibility lists a schedule a moment late."""
    async with asyncio.timeout(deadline(30)):
        while member not in (found := await read()):
            await asyncio.sleep(0.2)
    return found


async def test_a_sub_agent_is_its_lead_s_owner_s_and_shared_as_its_lead(
    agent_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await agent_factory(agents={"planner": PLANNER})
    plan_the_launch(agent, "Plan our launch.")
    with_people(tmp_path, monkeypatch)
    async with people_api(agent) as api:
        lead = await api.start("Plan our launch.", agents=["planner"], share={"carol": "read"})
        child = await child_of(agent, api.run(lead), name="planner")
        await until(child, lambda state: state.waiting_for is WaitingFor.INPUT)

        described = await child.describe()
        assert RunAccess.of(described.typed_search_attributes) == RunAccess(
            "alice", frozenset({"carol"}), frozenset()
        )
        seen_by_bob = await api.http.get(f"/v1/runs/{child.id}", headers=as_(BOB))
        assert error_of(seen_by_bob) == (404, ErrorCode.RUN_NOT_FOUND)
        read_by_carol = await api.http.get(f"/v1/runs/{child.id}", headers=as_(CAROL))
        assert (read_by_carol.status_code, read_by_carol.json()["may_write"]) == (200, False)
        answered = await api.http.post(
            f"/v1/runs/{child.id}/messages", json={"text": "Monday"}, headers=as_(ALICE)
        )
        assert answered.status_code == 202, answered.text


async def test_a_run_handed_over_or_resumed_stays_its_owner_s(api: Api) -> None:
    api.agent.model.add(say("One."), say("Two."), say("Three."))
    run_id = await api.start("count", continue_as_new_after_turns=1, share={"carol": "read"})
    await until_stopped(api, run_id)
    sent = await api.http.post(f"/v1/runs/{run_id}/messages?wait=true", json={"text": "on"})
    assert sent.status_code == 200, sent.text
    assert len(await api.agent.histories(api.run(run_id))) >= 2
    stopped = await api.http.post(f"/v1/runs/{run_id}/stop", json={})
    assert stopped.status_code == 202
    await until_stopped(api, run_id)
    resumed = await api.http.post(f"/v1/runs/{run_id}/resume", json={}, headers=as_(ERIN))
    assert resumed.status_code == 200, resumed.text

    described = await api.run(run_id).describe()
    assert RunAccess.of(described.typed_search_attributes) == RunAccess(
        "alice", frozenset({"carol"}), frozenset()
    )
    seen_by_bob = await api.http.get(f"/v1/runs/{run_id}", headers=as_(BOB))
    assert error_of(seen_by_bob) == (404, ErrorCode.RUN_NOT_FOUND)
    read_by_carol = await api.http.get(f"/v1/runs/{run_id}/transcript", headers=as_(CAROL))
    assert read_by_carol.status_code == 200


async def test_the_calls_to_decide_list_holds_no_run_the_caller_may_only_read(api: Api) -> None:
    api.agent.model.add(call("write_file", WRITE, id="w1"), say("written"))
    run_id = await api.start(
        "write the plan", require_approval=["write_file"], share={"carol": "read", "bob": "write"}
    )
    await until_stopped(api, run_id)

    api.http.headers.update(as_(BOB))
    assert run_id in await listed(api, "decidable=true", {run_id})
    api.http.headers.update(as_(CAROL))
    assert run_id in await listed(api, "", {run_id})
    decidable = (await api.http.get("/v1/runs?decidable=true&limit=1000")).json()["runs"]
    assert run_id not in {row["id"] for row in decidable}


async def two_gated_calls(api: Api) -> str:
    """Alice's run waiting on two calls: `write_file` `w1`, which dave approves, and
    `list_files` `l2`, which names no approver (its run's writers decide it)."""
    api.agent.model.add(
        calls(
            ScriptedToolCall(name="write_file", arguments=WRITE, id="w1"),
            ScriptedToolCall(name="list_files", arguments={}, id="l2"),
        ),
        say("Both done."),
    )
    run_id = await api.start(
        "write and look",
        require_approval=["write_file", "list_files"],
        approvers={"write_file": ["dave"]},
    )
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.APPROVAL
    return run_id


async def test_an_approver_of_one_call_may_not_decide_another_open_to_anyone(api: Api) -> None:
    run_id = await two_gated_calls(api)

    for call_id in ("l2", None):
        refused = await api.http.post(
            f"/v1/runs/{run_id}/approvals",
            json={"call_id": call_id, "approved": True},
            headers=as_(DAVE),
        )
        assert error_of(refused) == (403, ErrorCode.NOT_ALLOWED), call_id
    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"call_id": "w1", "approved": True}, headers=as_(DAVE)
    )
    assert decided.status_code == 200, decided.text
    assert [p["call_id"] for p in decided.json()["pending_approvals"]] == ["l2"]


@pytest.mark.parametrize(
    ("caller", "clause"),
    [
        (Caller("bob", ("ops",)), "(TarryOwner = 'bob' OR TarryReaders IN ('bob', 'group:ops'))"),
        (Caller("o'brien", ("ops",)), "(TarryReaders IN ('group:ops'))"),
        (Caller("o'brien"), "WorkflowId = ''"),
        (Caller("group:ops"), "(TarryOwner = 'group:ops')"),
        (Caller("erin", ("admins",)), None),
    ],
)
def test_a_list_is_a_query_of_the_names_the_caller_goes_by_and_no_quote_enters_it(
    caller: Caller, clause: str | None
) -> None:
    policy = Policy.of(Visibility.PRIVATE, ["group:admins"])

    assert policy.readable_clause(caller) == clause


async def test_another_user_s_start_with_the_same_key_starts_their_own_run(api: Api) -> None:
    api.agent.model.add(say("Hello, alice."), say("Hello, bob."))
    body = {"prompt": "hello"}
    key = {"Idempotency-Key": f"key-{uuid.uuid4().hex}"}
    first = await api.http.post("/v1/runs", json=body, headers=key)
    assert first.status_code == 201, first.text
    api.run(first.json()["id"])

    bobs = await api.http.post("/v1/runs", json=body, headers=key | as_(BOB))

    assert bobs.status_code == 201, bobs.text
    api.run(bobs.json()["id"])
    assert bobs.json()["id"] != first.json()["id"]
    retried = await api.http.post("/v1/runs", json=body, headers=key)
    assert (retried.status_code, retried.json()["id"]) == (201, first.json()["id"])


async def test_the_audit_trail_of_another_user_s_run_is_neither_read_nor_listed(
    api: Api,
) -> None:
    alices = await alices_run(api)

    asked = await api.http.get("/v1/audit", params={"run": alices}, headers=as_(BOB))
    all_of_franks = await api.http.get("/v1/audit", headers=as_(FRANK))
    carols = await api.http.get("/v1/audit", params={"run": alices}, headers=as_(CAROL))

    assert error_of(asked) == (404, ErrorCode.RUN_NOT_FOUND)
    assert all_of_franks.json()["records"] == []
    assert [r["act"] for r in carols.json()["records"]] == ["start"]  # read shared


async def test_a_run_naming_more_people_than_its_search_attributes_hold_is_refused(
    api: Api,
) -> None:
    many = {f"user-{n:04d}-of-a-long-list": "read" for n in range(100)}

    answer = await api.http.post("/v1/runs", json={"prompt": "hi", "share": many})
    quoted = await api.http.post(
        "/v1/runs", json={"prompt": "hi", "approvers": {"write_file": ["o'brien"]}}
    )

    assert error_of(answer) == (422, ErrorCode.INPUT_INVALID)
    assert "share with a group instead" in answer.json()["error"]["message"]
    assert error_of(quoted) == (422, ErrorCode.INPUT_INVALID)


async def points_of(api: Api, dataset: str, token: str) -> set[str]:
    """The run ids of the points of `dataset`, as `token`'s user exports it."""
    response = await api.http.get(f"/v1/datasets/{dataset}/points", headers=as_(token))
    assert response.status_code == 200, response.text
    return {json.loads(line)["run_id"] for line in response.text.splitlines()}


async def test_a_dataset_never_holds_a_run_its_creator_may_not_read(api: Api) -> None:
    api.agent.model.add(say("alice's answer"), say("bob's answer"))
    alices = await api.start("alice's private question")
    await until_stopped(api, alices)
    api.http.headers.update(as_(BOB))
    bobs = await api.start("bob's question")
    await until_stopped(api, bobs)
    api.http.headers.update(as_(ERIN))
    await listed(api, "", {alices, bobs})

    made = {}
    for name, token, query in (
        ("bobs", BOB, ""),
        ("bobs-of-alice", BOB, "user=alice"),
        ("erins", ERIN, ""),
    ):
        response = await api.http.post(
            "/v1/datasets", json={"name": name, "query": query}, headers=as_(token)
        )
        assert response.status_code == 201, response.text
        made[name] = response.json()

    assert await points_of(api, "bobs", BOB) == {bobs}
    assert made["bobs-of-alice"]["runs"] == 0
    assert {alices, bobs} <= await points_of(api, "erins", ERIN)
    assert made["bobs"]["created_by"] == "bob"


async def test_another_user_s_dataset_is_404_on_every_route_that_names_it_and_not_listed(
    api: Api,
) -> None:
    api.agent.model.add(say("alice's answer"))
    await until_stopped(api, await api.start("alice's question"))
    created = await api.http.post("/v1/datasets", json={"name": "alices"})
    assert created.status_code == 201, created.text

    named = await routes(api, "dataset")
    assert len(named) == 2
    for method, path in named:
        response = await ask(api, method, path.format(dataset="alices"), BOB)
        assert error_of(response) == (404, ErrorCode.DATASET_NOT_FOUND), (method, path)
        unknown = await ask(api, method, path.format(dataset="nobodys"), BOB)
        assert response.json()["error"]["message"] == unknown.json()["error"]["message"].replace(
            "nobodys", "alices"
        ), "a hidden dataset answers as one that does not exist"
        assert (await ask(api, method, path.format(dataset="alices"), ERIN)).status_code == 200
    listed_by_bob = (await api.http.get("/v1/datasets", headers=as_(BOB))).json()["datasets"]
    assert "alices" not in {d["name"] for d in listed_by_bob}
    taken = await api.http.post("/v1/datasets", json={"name": "alices"}, headers=as_(BOB))
    assert error_of(taken) == (403, ErrorCode.NOT_ALLOWED)


async def test_another_user_s_eval_is_404_and_its_owner_and_an_admin_read_it(api: Api) -> None:
    agree_on_three(api.agent.model)
    input = EvalInput(dataset="decisions", points=labelled_points(), model="default")
    handle = await start_eval(api.agent.tarry.client, api.agent.tarry.task_queue, "alice", input)
    await wait_report(handle)

    path = f"/v1/evals/{handle.id}"
    read = {token: await ask(api, "get", path, token) for token in (ALICE, BOB, ERIN)}

    assert error_of(read[BOB]) == (404, ErrorCode.EVAL_NOT_FOUND)
    assert (read[ALICE].status_code, read[ERIN].status_code) == (200, 200)
    report = await api.http.get(path, headers=as_(ALICE))
    assert report.json()["eval_id"] == handle.id
