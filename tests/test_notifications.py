"""Notifications: a run tells the receivers of the worker's `[[notify]]`
entries of its stop points with signed POSTs, retried while a receiver is down, never
lost to a hand-over, the run's end or a dead worker; action links in them decide a
gated call once, as the person they were sent to, without a bearer token.

Every receiver here is a real HTTP server on 127.0.0.1, every run a real one."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from pydantic import SecretStr
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client

from tarry.api import ApiServer, create_app
from tarry.client import RunHandle, Tarry
from tarry.config.settings import TarrySettings
from tarry.contracts import Budget, ErrorCode, Phase, Usage, WaitingFor
from tarry.core.action_links import Action, sign, verify
from tarry.core.identities import Caller
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.conftest import Agent
from tests.deadline import TIMEOUT, deadline
from tests.faults import LOCAL_USER, CrashRig
from tests.local_http import serving_app
from tests.test_cli_approvals import decision_of, until_state

SECRET = "receiver-secret-0123456789"
ACTION_KEY = "tarry-action-key-0123456789"
ALICE = "alice-token-0123456789"
EVERY_EVENT = ["waiting_for_input", "waiting_for_approval", "waiting_for_budget", "ended"]
WRITE = {"path": "plan.md", "content": "ship it"}
DOWN = deadline(10)
"""How long a receiver is down: long enough for several tries with backoff."""


# --- A webhook receiver -----------------------------------------------------------


@dataclass
class Try:
    """One POST the receiver got, and what it answered (None: held, never answered)."""

    event_id: str
    signature: str
    body: bytes
    status: int | None

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A receiver on 127.0.0.1 that records every try and answers `status`; with
    `hold_next`, it holds the next try unanswered until the test ends."""

    status: int = 200
    hold_next: bool = False
    tries: list[Try] = field(default_factory=list)
    held: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def delivered(self) -> list[Try]:
        return [t for t in self.tries if t.status is not None and t.status < 300]

    async def take(self, request: web.Request) -> web.Response:
        body = await request.read()
        hold, self.hold_next = self.hold_next, False
        status = None if hold else self.status
        headers = request.headers
        self.tries.append(
            Try(headers["Tarry-Event-Id"], headers.get("Tarry-Signature", ""), body, status)
        )
        if hold:
            self.held.set()
            await self._release.wait()
        return web.Response(status=status or 200)

    async def until_taken(self, delivered: int = 1, *, tries: int = 0) -> None:
        """Until `delivered` notifications were taken and there were `tries` tries."""
        async with asyncio.timeout(TIMEOUT):
            while len(self.delivered) < delivered or len(self.tries) < tries:
                await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def listening(receiver: Receiver) -> AsyncIterator[Receiver]:
    """`receiver` served on a free port of 127.0.0.1 (its `url`)."""
    app = web.Application()
    app.router.add_post("/hook", receiver.take)
    async with serving_app(app) as url:
        receiver.url = f"{url}/hook"
        try:
            yield receiver
        finally:
            receiver._release.set()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with listening(Receiver()) as made:
        yield made


def verified(secret: str, delivery: Try) -> bool:
    """What a receiver checks (docs/guides/reaching-people.md): the HMAC-SHA256 of
    `{t}.{body}` under the shared secret."""
    fields = dict(part.split("=", 1) for part in delivery.signature.split(","))
    signed = f"{fields['t']}.".encode() + delivery.body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])


def entry(url: str, events: list[str], **fields: str) -> str:
    """One `[[notify]]` entry of a config file, signed with `SECRET`."""
    lines = ["[[notify]]", f'url = "{url}"', f"events = {json.dumps(events)}"]
    lines += [f'secret = "{SECRET}"', *(f'{key} = "{value}"' for key, value in fields.items())]
    return "\n".join(lines) + "\n"


def config(tmp_path: Path, url: str, events: list[str], **fields: str) -> Path:
    """A worker's config file with one `[[notify]]` entry, and its `to` user (alice) in
    `[api.users]`, as a config that sends links must have."""
    path = tmp_path / "tarry.toml"
    users = f'[api.users]\nalice = "{ALICE}"\n' if "to" in fields else ""
    path.write_text(entry(url, events, **fields) + users)
    return path


async def notifying(
    agent_factory: Any, tmp_path: Path, receiver: Receiver, events: list[str], **more: Any
) -> Agent:
    """An agent whose worker notifies `receiver` of `events`; with a `to` user in
    `entry`, its runs are that user's (a link goes only to whom may use the run)."""
    entry = more.pop("entry", {})
    path = config(tmp_path, receiver.url, events, **entry)
    agent: Agent = await agent_factory(worker_settings={"tarry_config": path, **more})
    if "to" in entry:
        agent.tarry = agent.tarry.acting_as(Caller(entry["to"]))
    return agent


def notify_activities(events: list[HistoryEvent]) -> list[str]:
    """`scheduled` or `completed` for each `notify` activity of a history, in order."""
    scheduled = {
        e.event_id
        for e in events
        if e.activity_task_scheduled_event_attributes.activity_type.name == "notify"
    }
    return [
        "completed" if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED else "scheduled"
        for e in events
        if e.event_id in scheduled
        or e.activity_task_completed_event_attributes.scheduled_event_id in scheduled
    ]


# --- Notifications ---------------------------------------------------------------


async def test_a_run_waiting_for_input_then_approval_then_ended_sends_three_signed_notifications(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(agent_factory, tmp_path, receiver, EVERY_EVENT)
    agent.model.add(
        say("Hello!"), call("write_file", WRITE, id="w1"), call("finish", {"result": "done"})
    )
    run = await agent.start("hi", require_approval=["write_file"])
    await receiver.until_taken(1)
    await run.send("write the plan")
    await receiver.until_taken(2)

    await run.decide("w1")
    result = await run.result()

    assert result.phase is Phase.COMPLETED
    sent = [t.json for t in receiver.delivered]
    assert [s["event"] for s in sent] == ["waiting_for_input", "waiting_for_approval", "ended"]
    assert all(verified(SECRET, t) for t in receiver.delivered)
    assert len({t.event_id for t in receiver.delivered}) == 3
    assert not any(verified("another-secret-0123456", t) for t in receiver.delivered)


async def test_a_notification_says_what_the_run_waits_for_and_links_to_it(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(
        agent_factory,
        tmp_path,
        receiver,
        ["waiting_for_approval"],
        tarry_public_url="https://tarry.example",
    )
    agent.model.add(call("write_file", WRITE, id="w1"))
    run = await agent.start("write the plan", require_approval=["write_file"])

    await receiver.until_taken(1)

    sent = receiver.delivered[0].json
    assert set(sent) == {
        "event",
        "run_id",
        "phase",
        "waiting_for",
        "pending_approvals",
        "summary",
        "links",
    }
    assert (sent["run_id"], sent["phase"], sent["waiting_for"]) == (
        run.id,
        "WaitingUser",
        "approval",
    )
    [pending] = sent["pending_approvals"]
    assert (pending["call_id"], pending["tool"]) == ("w1", "write_file")
    assert json.loads(pending["arguments"]) == WRITE
    assert pending["links"] == {}  # addressed to nobody: nobody's decision to make
    assert "write_file" in sent["summary"]
    assert sent["links"] == {"run": f"https://tarry.example/#/runs/{run.id}"}


async def test_an_approval_notification_says_in_short_what_the_call_would_do(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(agent_factory, tmp_path, receiver, ["waiting_for_approval"])
    agent.model.add(call("write_file", WRITE, id="w1"))
    await agent.start("write the plan", require_approval=["write_file"])

    await receiver.until_taken(1)

    sent = receiver.delivered[0].json
    [pending] = sent["pending_approvals"]
    assert pending["preview"] == {"summary": "plan.md: new file, 1 line"}
    assert sent["summary"] == "Wants to run write_file: plan.md: new file, 1 line"
    assert "run" in sent["links"]


async def test_a_run_that_spent_its_budget_says_so_and_what_it_spent(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(agent_factory, tmp_path, receiver, ["waiting_for_budget"])
    agent.model.add(call("list_files", id="c1", usage=Usage(total_tokens=120)))
    run = await agent.start("look around", budget=Budget(max_total_tokens=100))

    await receiver.until_taken(1)

    sent = receiver.delivered[0].json
    assert (sent["event"], sent["run_id"], sent["waiting_for"]) == (
        "waiting_for_budget",
        run.id,
        "budget",
    )
    assert "120 tokens" in sent["summary"]


async def test_a_stopped_run_s_ended_notification_says_who_stopped_it_and_why(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(agent_factory, tmp_path, receiver, ["ended"])
    run = await agent.start()

    await run.stop("the launch moved")
    await receiver.until_taken(1)

    assert receiver.delivered[0].json["summary"] == f"Stopped by {LOCAL_USER}: the launch moved"


async def test_a_notification_whose_receiver_is_down_arrives_once_it_is_up_with_one_event_id(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.status = 503
    agent = await notifying(agent_factory, tmp_path, receiver, ["ended"])
    run = await agent.start()
    await run.stop()
    await receiver.until_taken(0, tries=2)
    await asyncio.sleep(DOWN)

    receiver.status = 200
    async with asyncio.timeout(TIMEOUT):
        result = await run.result()

    assert result.phase is Phase.COMPLETED
    # The run closed only once its notification was taken: the server drops the
    # activities of a closed run.
    assert len(receiver.delivered) == 1
    assert len(receiver.tries) > 2
    assert {t.event_id for t in receiver.tries} == {receiver.delivered[0].event_id}


async def test_a_receiver_that_took_a_notification_is_not_sent_it_again_while_another_is_retried(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    path = tmp_path / "tarry.toml"
    async with listening(Receiver(status=503)) as other:
        path.write_text(entry(receiver.url, ["ended"]) + entry(other.url, ["ended"]))
        agent: Agent = await agent_factory(worker_settings={"tarry_config": path})
        run = await agent.start()
        await run.stop()
        await other.until_taken(0, tries=3)
        other.status = 200
        async with asyncio.timeout(TIMEOUT):
            await run.result()

    assert len(receiver.tries) == 1
    assert len(other.delivered) == 1
    assert receiver.tries[0].event_id == other.delivered[0].event_id


async def test_a_run_hands_over_only_once_its_notification_was_taken(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.status = 503
    agent = await notifying(agent_factory, tmp_path, receiver, ["waiting_for_input"])
    agent.model.add(say("one"))
    run = await agent.start("hi", continue_as_new_after_turns=1)
    await receiver.until_taken(0, tries=2)

    receiver.status = 200
    async with asyncio.timeout(TIMEOUT):
        while len(chain := await agent.histories(run)) < 2:
            await asyncio.sleep(0.1)

    assert len(receiver.delivered) == 1
    assert notify_activities(list(chain[0].events)) == ["scheduled", "completed"]


async def test_a_receiver_s_url_and_secret_and_the_action_links_never_enter_history(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(
        agent_factory,
        tmp_path,
        receiver,
        ["waiting_for_approval"],
        entry={"to": "alice"},
        tarry_action_key=ACTION_KEY,
    )
    agent.model.add(call("write_file", WRITE, id="w1"))
    run = await agent.start("write the plan", require_approval=["write_file"])
    await receiver.until_taken(1)

    history = await agent.history_json(run)

    [pending] = receiver.delivered[0].json["pending_approvals"]
    token = pending["links"]["approve"].rsplit("/", 1)[1]
    for secret in (SECRET, ACTION_KEY, receiver.url, token):
        assert secret not in history


async def test_a_run_on_a_worker_without_notify_entries_records_nothing_of_notifications(
    agent: Agent,
) -> None:
    agent.model.add(say("Hello!"))
    run = await agent.start("hi")
    await until_state(run, lambda s: s.waiting_for is WaitingFor.INPUT)

    history = await agent.tarry.client.get_workflow_handle(run.id).fetch_history()

    assert notify_activities(list(history.events)) == []
    markers = [e.marker_recorded_event_attributes for e in history.events]
    patches = [str(m.details) for m in markers if m.marker_name == "core_patch"]
    assert patches  # the run's other patches are there, to be looked through
    assert not [p for p in patches if "notifications" in p]


# --- A worker killed while notifying ----------------------------------------------


@pytest.fixture
async def model() -> AsyncIterator[ScriptedModel]:
    async with ScriptedModel() as scripted:
        yield scripted


async def test_a_notification_cut_off_by_a_killed_worker_is_delivered_by_a_new_one(
    temporal: Client, model: ScriptedModel, tmp_path: Path, receiver: Receiver
) -> None:
    path = config(tmp_path, receiver.url, ["waiting_for_input"])
    rig = CrashRig(
        temporal,
        model.base_url,
        tmp_path / "workspaces",
        tmp_path / "logs",
        env={"TARRY_CONFIG": str(path)},
    )
    try:
        model.add(say("Hello!"))
        receiver.hold_next = True
        first = await rig.worker()
        await rig.start("hi")
        async with asyncio.timeout(TIMEOUT):
            await receiver.held.wait()

        await first.kill()
        await rig.worker()
        await receiver.until_taken(1)
    finally:
        await rig.close()

    assert len(receiver.delivered) == 1
    assert [t.event_id for t in receiver.tries] == [receiver.delivered[0].event_id] * 2
    assert verified(SECRET, receiver.delivered[0])


# --- Action links --------------------------------------------------------------


@dataclass
class Linked:
    """A run waiting on a gated `write_file` call `w1`, the notification about it (for
    alice, with action links), and the API its links lead to."""

    run: RunHandle
    approve: str
    reject: str
    http: httpx.AsyncClient


@asynccontextmanager
async def linking(
    agent_factory: Any, temporal: Client, tmp_path: Path, receiver: Receiver
) -> AsyncIterator[tuple[Agent, httpx.AsyncClient]]:
    """An API that takes alice's token, and an agent whose runs are alice's and whose
    worker tells `receiver` of each wait for a decision, with action links to that API."""
    # The API takes tokens: the links need none.
    settings = TarrySettings(
        tarry_action_key=SecretStr(ACTION_KEY), tarry_api_tokens=[SecretStr(f"alice:{ALICE}")]
    )
    async with (
        ApiServer(create_app(Tarry(temporal), settings), "127.0.0.1", 0) as server,
        httpx.AsyncClient(timeout=httpx.Timeout(TIMEOUT, connect=deadline(5))) as http,
    ):
        agent = await notifying(
            agent_factory,
            tmp_path,
            receiver,
            ["waiting_for_approval"],
            entry={"to": "alice"},
            tarry_action_key=ACTION_KEY,
            tarry_public_url=server.url,
        )
        yield agent, http


@pytest.fixture
async def linked(
    agent_factory: Any, temporal: Client, tmp_path: Path, receiver: Receiver
) -> AsyncIterator[Linked]:
    async with linking(agent_factory, temporal, tmp_path, receiver) as (agent, http):
        agent.model.add(call("write_file", WRITE, id="w1"), say("written"))
        run = await agent.start("write the plan", require_approval=["write_file"])
        await receiver.until_taken(1)
        [pending] = receiver.delivered[0].json["pending_approvals"]
        yield Linked(run, pending["links"]["approve"], pending["links"]["reject"], http)


async def test_a_user_s_entry_is_told_only_of_the_runs_they_may_read(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(
        agent_factory,
        tmp_path,
        receiver,
        ["waiting_for_approval"],
        entry={"to": "alice"},
        tarry_action_key=ACTION_KEY,
    )
    bobs_words = {"path": "bob-private.md", "content": "bob's secret plan"}
    agent.model.add(call("write_file", bobs_words, id="w1"), call("write_file", WRITE, id="w2"))
    agent.tarry = agent.tarry.acting_as(Caller("bob"))
    not_hers = await agent.start("write the plan", require_approval=["write_file"])
    handle = agent.tarry.client.get_workflow_handle(not_hers.id)
    async with asyncio.timeout(TIMEOUT):  # its notification is done with: sent to nobody
        while "completed" not in notify_activities(list((await handle.fetch_history()).events)):
            await asyncio.sleep(0.1)
    shared = await agent.start(
        "write the plan", require_approval=["write_file"], share={"alice": "read"}
    )
    await receiver.until_taken(1)

    assert [t.json["run_id"] for t in receiver.tries] == [shared.id]
    assert not any(b"secret plan" in t.body for t in receiver.tries)


async def test_a_notification_links_a_run_and_its_calls_as_far_as_its_user_may_use_them(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(
        agent_factory,
        tmp_path,
        receiver,
        ["waiting_for_approval"],
        entry={"to": "alice"},
        tarry_action_key=ACTION_KEY,
    )
    agent.model.add(call("write_file", WRITE, id="w1"), call("write_file", WRITE, id="w2"))
    agent.tarry = agent.tarry.acting_as(Caller("bob"))
    read_only = await agent.start(
        "write the plan", require_approval=["write_file"], share={"alice": "read"}
    )
    await receiver.until_taken(1)
    shared = await agent.start(
        "write the plan", require_approval=["write_file"], share={"alice": "write"}
    )
    await receiver.until_taken(2)

    told = {d.json["run_id"]: d.json for d in receiver.delivered}
    assert set(told[read_only.id]["links"]) == {"run"}
    assert told[read_only.id]["pending_approvals"][0]["links"] == {}
    assert set(told[shared.id]["links"]) == {"run"}
    assert set(told[shared.id]["pending_approvals"][0]["links"]) == {"approve", "reject"}


async def test_opening_an_action_link_decides_nothing_until_it_is_confirmed(
    linked: Linked,
) -> None:
    page = await linked.http.get(linked.approve)

    assert page.status_code == 200
    assert '<form method="post">' in page.text
    assert "alice" in page.text
    assert "write_file" in page.text
    assert "ship it" in page.text  # the arguments a person approves
    assert (await linked.run.state()).waiting_for is WaitingFor.APPROVAL


async def test_an_action_link_approves_once_as_its_user_and_a_second_use_is_refused(
    linked: Linked,
) -> None:
    first = await linked.http.post(linked.approve)
    again = await linked.http.post(linked.approve)
    other = await linked.http.post(linked.reject)

    assert first.status_code == 200, first.text
    decision = await decision_of(linked.run)
    assert (decision.approved, decision.user, decision.source) == (True, "alice", "link")
    opened = await linked.http.get(linked.approve)
    for refused in (again, other, opened):
        assert refused.status_code == 409
        assert ErrorCode.APPROVAL_ALREADY_DECIDED in refused.text
    assert (await linked.run.state()).waiting_for is WaitingFor.INPUT


async def test_an_action_link_s_decision_is_audited_at_the_link_door_as_its_user(
    linked: Linked, temporal: Client
) -> None:
    decided = await linked.http.post(linked.approve)
    assert decided.status_code == 200, decided.text

    *_, last = (await Tarry(temporal).audit(run=linked.run.id)).records

    assert (last.act, last.by, last.door) == ("decision", "alice", "link")
    assert last.what == "approved write_file call w1"


async def test_an_expired_or_altered_action_link_changes_nothing(linked: Linked) -> None:
    action = verify(linked.approve.rsplit("/", 1)[1], SecretStr(ACTION_KEY), time.time())
    base = linked.approve.rsplit("/", 1)[0]
    expired = Action(action.run_id, action.call_id, True, "alice", expires=int(time.time()) - 1)
    mac = linked.reject.rsplit("/", 1)[1].split(".")[1]
    approving = sign(action, SecretStr(ACTION_KEY)).split(".")[0]

    late = await linked.http.post(f"{base}/{sign(expired, SecretStr(ACTION_KEY))}")
    forged = await linked.http.post(f"{base}/{approving}.{mac}")  # reject's MAC, approve's claim
    foreign = await linked.http.post(f"{base}/{sign(action, SecretStr('another-key-0123456789'))}")

    assert late.status_code == 410
    assert ErrorCode.ACTION_LINK_EXPIRED in late.text
    for refused in (forged, foreign):
        assert refused.status_code == 403
        assert ErrorCode.ACTION_LINK_INVALID in refused.text
    assert (await linked.run.state()).waiting_for is WaitingFor.APPROVAL


async def test_an_action_link_of_a_user_no_longer_in_the_api_s_users_decides_nothing(
    linked: Linked, temporal: Client
) -> None:
    token = linked.approve.rsplit("/", 1)[1]
    alice_removed = TarrySettings(
        tarry_action_key=SecretStr(ACTION_KEY), tarry_api_tokens=[SecretStr(f"bob:{ALICE}")]
    )
    async with ApiServer(create_app(Tarry(temporal), alice_removed), "127.0.0.1", 0) as api:
        opened = await linked.http.get(f"{api.url}/v1/actions/{token}")
        followed = await linked.http.post(f"{api.url}/v1/actions/{token}")

    for refused in (opened, followed):
        assert refused.status_code == 403
        assert ErrorCode.ACTION_LINK_INVALID in refused.text
        assert "alice" in refused.text
    assert (await linked.run.state()).waiting_for is WaitingFor.APPROVAL


async def test_a_page_of_another_site_cannot_use_an_action_link(linked: Linked) -> None:
    cross_site = await linked.http.post(linked.approve, headers={"Origin": "https://evil.example"})
    rebound = await linked.http.post(linked.approve, headers={"Host": "evil.example"})

    assert cross_site.status_code == 403
    assert rebound.status_code == 421
    assert (await linked.run.state()).waiting_for is WaitingFor.APPROVAL


async def test_an_action_link_expires_at_the_call_s_approval_deadline(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(
        agent_factory,
        tmp_path,
        receiver,
        ["waiting_for_approval"],
        entry={"to": "alice"},
        tarry_action_key=ACTION_KEY,
    )
    agent.model.add(call("write_file", WRITE, id="w1"))
    run = await agent.start("write", require_approval=["write_file"], approval_timeout=3600)
    await receiver.until_taken(1)

    [pending] = receiver.delivered[0].json["pending_approvals"]
    token = pending["links"]["approve"].rsplit("/", 1)[1]

    [call_state] = (await run.state()).pending_approvals
    assert call_state.deadline is not None
    action = verify(token, SecretStr(ACTION_KEY), call_state.deadline.timestamp() - 1)
    assert action.expires == int(call_state.deadline.timestamp())


async def test_a_slack_notification_has_the_summary_and_buttons_for_the_links(
    agent_factory: Any, tmp_path: Path, receiver: Receiver
) -> None:
    agent = await notifying(
        agent_factory,
        tmp_path,
        receiver,
        ["waiting_for_approval"],
        entry={"format": "slack", "to": "alice"},
        tarry_action_key=ACTION_KEY,
        tarry_public_url="https://tarry.example",
    )
    agent.model.add(call("write_file", WRITE, id="w1"))
    run = await agent.start("write the plan", require_approval=["write_file"])

    await receiver.until_taken(1)

    message = receiver.delivered[0].json
    assert run.id in message["text"]
    section, actions = message["blocks"]
    assert "write_file" in section["text"]["text"]
    buttons = {b["text"]["text"]: b["url"] for b in actions["elements"]}
    assert buttons["Open the run"] == f"https://tarry.example/#/runs/{run.id}"
    assert buttons["Approve write_file"].startswith("https://tarry.example/v1/actions/")
    assert buttons["Reject write_file"].startswith("https://tarry.example/v1/actions/")
    assert verified(SECRET, receiver.delivered[0])
