"""People over HTTP: a token names its user (`[api.users]`, `TARRY_API_TOKENS=NAME:TOKEN`,
a bare token is `api`), each run records who replied, decided, raised its budget and
stopped it, and `RunInput.approvers` decides who may decide a gated call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tarry.config.settings import ConfigError, load_settings
from tarry.contracts import TEMPORAL_UI, ErrorCode, WaitingFor
from tarry.testing.scripted_model import call, say
from tests.conftest import Agent
from tests.deadline import deadline
from tests.http_api import Access, Api
from tests.test_cli_approvals import until_state
from tests.test_guardrail_asks import SECRETS
from tests.test_http_api import WRITE, error_of, gated, until_stopped

ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"
CAROL = "carol-token-0123456789"
DAVE = "dave-token-0123456789a"
BARE = "a-bare-token-0123456789"

# Everyone uses every run here: who may see which is tests/test_owners.py's.
CONFIG = f"""
[api]
visibility = "team"

[api.users]
alice = "{ALICE}"
bob = "{BOB}"
carol = "{CAROL}"

[api.groups]
ops = ["carol"]
"""


@pytest.fixture
def api_access(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Access:
    """The `api` fixture's: the people of `CONFIG`, and `dave` and a bare token in the
    environment; its requests are alice's unless they send another token."""
    config = tmp_path / "tarry.toml"
    config.write_text(CONFIG)
    monkeypatch.setenv("TARRY_CONFIG", str(config))
    monkeypatch.setenv("TARRY_API_TOKENS", f"dave:{DAVE},{BARE}")
    return Access(load_settings(), ALICE)


def as_(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def transcript(api: Api, run_id: str) -> list[dict[str, Any]]:
    response = await api.http.get(f"/v1/runs/{run_id}/transcript")
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def decision_in(messages: list[dict[str, Any]]) -> dict[str, Any]:
    (tool,) = [m for m in messages if m["role"] == "tool"]
    decision: dict[str, Any] = tool["decision"]
    return decision


async def sent_in_history(agent: Agent, run_id: str) -> list[tuple[str, Any]]:
    """(name, decoded payload) of every signal and accepted update in the run's history."""
    client = agent.tarry.client
    history = await client.get_workflow_handle(run_id).fetch_history()
    sent: list[tuple[str, Any]] = []
    for event in history.events:
        if event.HasField("workflow_execution_signaled_event_attributes"):
            signal = event.workflow_execution_signaled_event_attributes
            name, payloads = signal.signal_name, signal.input.payloads
        elif event.HasField("workflow_execution_update_accepted_event_attributes"):
            update = event.workflow_execution_update_accepted_event_attributes.accepted_request
            name, payloads = update.input.name, update.input.args.payloads
        else:
            continue
        values = await client.data_converter.decode(list(payloads))
        sent.append((name, values[0] if values else None))
    return sent


async def test_a_reply_and_a_decision_are_recorded_under_their_senders_names(api: Api) -> None:
    api.agent.model.add(call("write_file", WRITE, id="w1"), say("written"))
    run_id = await api.start(require_approval=["write_file"])

    replied = await api.http.post(
        f"/v1/runs/{run_id}/messages?wait=true", json={"text": "write the plan"}
    )
    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"call_id": "w1", "approved": True}, headers=as_(BOB)
    )

    assert replied.json()["waiting_for"] == WaitingFor.APPROVAL
    assert decided.status_code == 200, decided.text
    messages = await transcript(api, run_id)
    assert [(m["content"], m["by"]) for m in messages if m["role"] == "user"] == [
        ("write the plan", "alice")
    ]
    assert decision_in(messages)["user"] == "bob"
    sent = dict(await sent_in_history(api.agent, run_id))
    assert (sent["send"]["text"], sent["send"]["by"]) == ("write the plan", "alice")
    assert (sent["decide"]["call_id"], sent["decide"]["by"]) == ("w1", "bob")


async def test_a_decision_by_someone_outside_the_approvers_is_403_and_decides_nothing(
    api: Api,
) -> None:
    run_id = await gated(api, approvers={"write_file": ["bob"]})

    refused = await api.http.post(f"/v1/runs/{run_id}/approvals", json={"approved": True})

    assert error_of(refused) == (403, ErrorCode.APPROVAL_NOT_ALLOWED)
    state = await api.state(run_id)
    assert state.waiting_for is WaitingFor.APPROVAL
    assert [p.call_id for p in state.pending_approvals] == ["w1"]
    assert "decide" not in [name for name, _ in await sent_in_history(api.agent, run_id)]
    assert not (api.agent.workspace_root / run_id / "plan.md").exists()


async def test_a_decision_on_a_held_text_by_someone_outside_its_approvers_is_403(
    api: Api,
) -> None:
    api.agent.model.add(say("Noted."))
    run_id = await api.start("the secret is 42", guardrails=[{**SECRETS, "approvers": ["bob"]}])
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.GUARDRAIL

    refused = await api.http.post(f"/v1/runs/{run_id}/approvals", json={"approved": True})
    edit = {"approved": True, "arguments": {"text": "the number is withheld"}}
    decided = await api.http.post(f"/v1/runs/{run_id}/approvals", json=edit, headers=as_(BOB))

    assert error_of(refused) == (403, ErrorCode.APPROVAL_NOT_ALLOWED)
    assert decided.status_code == 200, decided.text
    [reply] = [m for m in await transcript(api, run_id) if m["role"] == "user"]
    assert reply["content"] == "the number is withheld"
    decision = {"allowed": True, "edited": True, "by": "bob", "asked_as": "guardrail-1"}
    assert reply["guardrails"][0]["decision"] == decision


async def test_a_group_among_the_approvers_lets_its_members_decide(api: Api) -> None:
    run_id = await gated(api, approvers={"write_file": ["ops"]})

    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"approved": True}, headers=as_(CAROL)
    )

    assert decided.status_code == 200, decided.text
    assert decision_in(await transcript(api, run_id))["user"] == "carol"
    assert (api.agent.workspace_root / run_id / "plan.md").read_text() == "ship it"


async def test_the_star_names_the_approvers_of_every_tool_not_named(api: Api) -> None:
    run_id = await gated(api, approvers={"*": ["bob"], "read_file": ["alice"]})

    refused = await api.http.post(f"/v1/runs/{run_id}/approvals", json={"approved": True})
    decided = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"approved": True}, headers=as_(BOB)
    )

    assert error_of(refused) == (403, ErrorCode.APPROVAL_NOT_ALLOWED)
    assert decided.status_code == 200, decided.text


async def test_the_decidable_list_holds_the_runs_with_a_call_the_caller_may_decide(
    api: Api,
) -> None:
    api.agent.model.add(call("write_file", WRITE, id="w1"), call("write_file", WRITE, id="w1"))
    bobs, alices = [
        await api.start("write the plan", require_approval=["write_file"], approvers=approvers)
        for approvers in ({"write_file": ["bob"]}, {"write_file": ["alice"]})
    ]
    for run_id in (bobs, alices):
        assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.APPROVAL

    async def listed(headers: dict[str, str]) -> set[str]:
        response = await api.http.get("/v1/runs?decidable=true&limit=100", headers=headers)
        assert response.status_code == 200, response.text
        return {run["id"] for run in response.json()["runs"]} & {bobs, alices}

    async with asyncio.timeout(deadline(30)):  # visibility lists a new run a moment later
        while await listed({}) != {alices}:
            await asyncio.sleep(0.2)
    assert await listed(as_(BOB)) == {bobs}


async def test_the_decidable_list_holds_a_run_whose_held_text_the_caller_may_decide(
    api: Api,
) -> None:
    run_id = await api.start("the secret is 42", guardrails=[{**SECRETS, "approvers": ["bob"]}])
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.GUARDRAIL

    async def listed(headers: dict[str, str]) -> bool:
        response = await api.http.get("/v1/runs?decidable=true&limit=100", headers=headers)
        assert response.status_code == 200, response.text
        return run_id in {run["id"] for run in response.json()["runs"]}

    async with asyncio.timeout(deadline(30)):  # visibility lists a new run a moment later
        while not await listed(as_(BOB)):
            await asyncio.sleep(0.2)
    assert not await listed({})  # alice is none of its approvers


@pytest.mark.parametrize("query", ["phase=Completed", "waiting_for=input"])
async def test_the_decidable_list_with_a_filter_it_contradicts_is_422(api: Api, query: str) -> None:
    response = await api.http.get(f"/v1/runs?decidable=true&{query}")

    assert error_of(response) == (422, ErrorCode.INPUT_INVALID)
    assert "decidable" in response.json()["error"]["message"]


async def test_a_run_s_view_says_which_calls_its_caller_may_decide(api: Api) -> None:
    run_id = await gated(api, approvers={"write_file": ["bob"]})

    alice_sees = (await api.http.get(f"/v1/runs/{run_id}")).json()["pending_approvals"]
    bob_sees = (await api.http.get(f"/v1/runs/{run_id}", headers=as_(BOB))).json()[
        "pending_approvals"
    ]

    assert [(p["approvers"], p["may_decide"]) for p in alice_sees] == [(["bob"], False)]
    assert [(p["approvers"], p["may_decide"]) for p in bob_sees] == [(["bob"], True)]


async def test_a_named_token_of_the_environment_is_its_user_and_a_bare_one_is_api(
    api: Api,
) -> None:
    api.agent.model.add(say("one"), say("two"))
    run_id = await api.start()

    for token, text in ((DAVE, "from dave"), (BARE, "from a bare token")):
        sent = await api.http.post(
            f"/v1/runs/{run_id}/messages?wait=true", json={"text": text}, headers=as_(token)
        )
        assert sent.status_code == 200, sent.text

    users = [(m["content"], m["by"]) for m in await transcript(api, run_id) if m["role"] == "user"]
    assert users == [("from dave", "dave"), ("from a bare token", "api")]


async def test_a_budget_raise_records_who_raised_it(api: Api) -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    api.agent.model.add(call("list_files", id="c1", usage=usage), say("Three files."))
    run_id = await api.start("look around", budget={"max_total_tokens": 100})
    assert (await until_stopped(api, run_id))["waiting_for"] == WaitingFor.BUDGET

    raised = await api.http.post(
        f"/v1/runs/{run_id}/budget", json={"max_total_tokens": 1000}, headers=as_(CAROL)
    )

    assert raised.status_code == 200, raised.text
    assert raised.json()["budget_raised_by"] == "carol"
    assert dict(await sent_in_history(api.agent, run_id))["raise_budget"]["by"] == "carol"


async def test_a_stop_records_who_stopped_the_run(api: Api) -> None:
    api.agent.model.add(say("Hello."))
    run_id = await api.start("hi")
    await until_stopped(api, run_id)

    stopped = await api.http.post(
        f"/v1/runs/{run_id}/stop", json={"reason": "done here"}, headers=as_(BOB)
    )
    result = await api.run(run_id).result()

    assert stopped.status_code == 202
    assert (result.stop_reason, result.stopped_by) == ("done here", "bob")
    assert (await api.state(run_id)).stopped_by == "bob"


async def test_a_pause_records_who_paused_the_run(api: Api) -> None:
    # The model holds its answer for seconds: the pause reaches a run still working (a
    # run that already waits has nothing to pause, and records no one).
    api.agent.model.add(say("slowly", delay=deadline(5)))
    run_id = await api.start("hi")
    await api.agent.model.wait_for_requests(1, timeout=deadline(10))

    paused = await api.http.post(f"/v1/runs/{run_id}/pause", json={}, headers=as_(BOB))

    assert paused.status_code == 202
    assert (await until_stopped(api, run_id))["paused_by"] == "bob"
    assert dict(await sent_in_history(api.agent, run_id))["pause"] == {"by": "bob", "door": "api"}


async def test_a_body_cannot_say_who_sends_it(api: Api) -> None:
    run_id = await gated(api, approvers={"write_file": ["bob"]})

    refused = await api.http.post(
        f"/v1/runs/{run_id}/approvals", json={"approved": True, "by": "bob", "groups": ["ops"]}
    )

    assert error_of(refused) == (403, ErrorCode.APPROVAL_NOT_ALLOWED)


async def test_signals_straight_from_temporal_are_an_operator_s_recorded_as_temporal_ui(
    api: Api,
) -> None:
    run_id = await gated(api, approvers={"write_file": ["bob"]})
    # What the Temporal UI sends: the signal's payload as typed, without `by`.
    handle = api.agent.tarry.client.get_workflow_handle(run_id)
    api.agent.model.add(say("You are welcome."))

    await handle.signal("approve", {"approved": True})
    await until_state(api.run(run_id), lambda s: s.waiting_for is WaitingFor.INPUT)
    await handle.signal("user_input", {"text": "thanks"})
    await until_state(api.run(run_id), lambda s: s.last_assistant_text == "You are welcome.")

    messages = await transcript(api, run_id)
    assert decision_in(messages)["user"] == TEMPORAL_UI
    assert [(m["content"], m["by"]) for m in messages if m["role"] == "user"] == [
        ("write the plan", "alice"),
        ("thanks", TEMPORAL_UI),
    ]


@pytest.mark.parametrize(
    ("config", "environment", "named"),
    [
        ('[api.users]\nalice = "tiny-secret"\n', "", "[api.users] alice"),
        ("", "alice:tiny-secret", "TARRY_API_TOKENS"),
        ("", ":" + ALICE, "TARRY_API_TOKENS"),
    ],
)
def test_a_short_token_or_a_nameless_one_is_refused_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, environment: str, named: str
) -> None:
    path = tmp_path / "tarry.toml"
    path.write_text(config)
    monkeypatch.setenv("TARRY_CONFIG", str(path))
    monkeypatch.setenv("TARRY_API_TOKENS", environment)

    with pytest.raises(ConfigError) as refused:
        load_settings()

    assert named in str(refused.value)
    assert "tiny-secret" not in str(refused.value)  # a token, even a bad one, is never shown
