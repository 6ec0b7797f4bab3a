"""The guides' offline tours (`tarry dev --tour NAME`), played as a person plays them:
the stack started as the guide's "Try it offline" section says, then its commands one by
one, read from the guide itself, so a guide that drifts from the code fails here. Offline:
the model is `tarry dev`'s own, playing the tour's script file over real HTTP."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tarry.cli import oauth_tour, tour
from tarry.contracts import ChatMessage, ForkOrigin, Phase, RunState, WaitingFor
from tarry.contracts.events import EventKind
from tarry.testing import oauth_servers
from tests.test_tour import (
    COMMAND_TIMEOUT,
    ROOT,
    Dev,
    _command,
    shell,
    shell_commands,
    tarry_dev,
    tool_calls,
)

SECTION = "## Try it offline"


@dataclass(frozen=True)
class Ran:
    command: str
    code: int
    output: str
    state: RunState
    """The state of the run `$RUN` once the command returned."""


@dataclass(frozen=True)
class Played:
    ran: list[Ran]
    variables: dict[str, str]
    """What the commands assigned: `RUN`, `FORK`."""
    states: dict[str, RunState]
    """Each run's state at the end, by id: the runs assigned, and those of `more_runs`."""
    transcripts: dict[str, list[ChatMessage]]
    workspace: Path
    """`$RUN`'s workspace."""
    banner: list[str]
    """What `tarry dev --tour NAME` printed as it started."""

    def step(self, starting: str) -> Ran:
        """The one command that starts with `starting` (after `$RUN` is put in)."""
        run = self.variables["RUN"]
        (found,) = [r for r in self.ran if r.command.replace("$RUN", run).startswith(starting)]
        return found


def guide_stacks(name: str) -> tuple[list[str], list[str]]:
    """The guide's "Try it offline" section: its `tarry dev` lines, a terminal each, and
    its commands."""
    text = (ROOT / tour.TOURS[name]).read_text()
    section = re.split(r"^## ", text.split(SECTION, 1)[1], maxsplit=1, flags=re.MULTILINE)[0]
    *stacks, commands = shell_commands(section)
    return [line for block in stacks for line in block], commands


def guide_tour(name: str) -> tuple[str, list[str]]:
    """The guide's one `tarry dev` line and its commands."""
    (stack,), commands = guide_stacks(name)
    return stack, commands


def without_settings(line: str) -> str:
    """A stack's line without the variables it sets first (its ports): a test gives each
    stack free ports of its own."""
    words = shlex.split(line, comments=True)
    while "=" in words[0]:
        words.pop(0)
    return shlex.join(words)


Before = Callable[[str, Dev], Awaitable[None]]
"""What a person waits to see before typing `command` (`tarry watch` in a third terminal)."""


async def play(
    name: str, home: Path, more_runs: tuple[str, ...] = (), before: Before | None = None
) -> Played:
    """The tour `name` of its guide, each command's exit code, output and `$RUN`'s state
    after it; then every run's state and transcript (`more_runs`: ids with `{RUN}` in them,
    for runs no command names)."""
    stack, commands = guide_tour(name)
    assert _command(stack) == f"tarry dev --tour {name}"
    async with tarry_dev(home, Path(sys.executable).parent, stack) as dev:
        ran = []
        for command in commands:
            if before is not None:
                await before(command, dev)
            code, output = await shell(command, dev.env, home)
            state = await dev.tarry.get(dev.env["RUN"]).state()
            ran.append(Ran(command, code, output, state))
        variables: dict[str, str] = {k: dev.env[k] for k in ("RUN", "FORK") if k in dev.env}
        ids = [*variables.values(), *(run.format(RUN=variables["RUN"]) for run in more_runs)]
        states = {i: await dev.tarry.get(i).state() for i in ids}
        transcripts = {i: await dev.tarry.get(i).transcript() for i in ids}
    workspace = home / ".tarry" / "workspaces" / variables["RUN"]
    return Played(ran, variables, states, transcripts, workspace, dev.banner)


def test_every_tour_has_its_script_and_a_guide_that_plays_it() -> None:
    for name in tour.TOURS:
        stacks, commands = guide_stacks(name)

        assert all(without_settings(s).startswith(f"tarry dev --tour {name}") for s in stacks)
        assert tour.script(name).conversations  # its file exists and is a script
        assert commands[0].startswith("RUN=$(tarry start ")


async def test_the_approvers_tour_refuses_mallory_and_records_alices_decision(
    tmp_path: Path,
) -> None:
    played = await play("approvers", tmp_path)
    run = played.variables["RUN"]
    refused = played.step("TARRY_USER=mallory")
    approved = played.step("TARRY_USER=alice")

    assert played.step("tarry watch").state.waiting_for is WaitingFor.APPROVAL
    assert refused.code != 0
    assert "APPROVAL_NOT_ALLOWED" in refused.output
    assert refused.state.waiting_for is WaitingFor.APPROVAL  # decided nothing
    assert approved.code == 0
    assert played.states[run].phase is Phase.COMPLETED
    [decided] = [m for m in played.transcripts[run] if m.decision is not None]
    assert decided.decision is not None
    assert decided.decision.approved
    assert decided.decision.user == "alice"
    assert "domain" in (played.workspace / "notes.md").read_text()


async def test_the_approvers_tour_appends_to_the_notes_and_shows_the_one_line_it_adds(
    tmp_path: Path,
) -> None:
    played = await play("approvers", tmp_path)

    watched = played.step("tarry watch").output.splitlines()

    assert "    notes.md: 1 line added" in watched
    assert "    │ +- Sam renews the domain." in watched
    assert not [line for line in watched if line.startswith("    │ -") and "---" not in line]
    notes = (tour.WORKSPACE / "notes.md").read_text()
    assert (played.workspace / "notes.md").read_text() == notes + "- Sam renews the domain.\n"


async def test_the_rules_tour_approves_the_draft_and_rejects_the_send_without_asking(
    tmp_path: Path,
) -> None:
    played = await play("rules", tmp_path)
    run = played.variables["RUN"]
    decisions = [m.decision for m in played.transcripts[run] if m.decision is not None]

    assert all(r.code == 0 for r in played.ran), played.ran
    assert played.states[run].phase is Phase.COMPLETED
    assert [(d.approved, d.by, d.user) for d in decisions] == [
        (True, "rule", "rule 1"),
        (False, "rule", "rule 2"),
    ]
    assert (played.workspace / "drafts" / "email.md").is_file()
    assert not (played.workspace / "outbox").exists()
    assert "without asking" in played.step("tarry show").output


async def test_the_teams_tour_delegates_to_the_researcher_and_finishes_with_its_answer(
    tmp_path: Path,
) -> None:
    played = await play("teams", tmp_path, more_runs=("{RUN}:researcher-1",))
    lead = played.variables["RUN"]
    child = f"{lead}:researcher-1"

    assert all(r.code == 0 for r in played.ran), played.ran
    assert played.states[lead].phase is Phase.COMPLETED
    assert tool_calls(played.transcripts[lead]) == ["agent__researcher", "finish"]
    assert played.states[child].phase is Phase.COMPLETED
    assert played.states[child].parent == lead
    assert "Tour       teams: docs/guides/teams.md, 'Try it offline'" in played.banner
    assert tool_calls(played.transcripts[child]) == ["read_file"]
    listed = played.step("tarry list").output
    assert lead in listed
    assert child in listed


async def test_the_fork_tour_answers_the_fork_its_own_way_and_leaves_the_original(
    tmp_path: Path,
) -> None:
    played = await play("fork", tmp_path)
    run, fork = played.variables["RUN"], played.variables["FORK"]

    assert all(r.code == 0 for r in played.ran), played.ran
    assert "what we launched and why" in (played.states[run].last_assistant_text or "")
    assert "we shipped it" in (played.states[fork].last_assistant_text or "")
    assert played.states[fork].forked_from == ForkOrigin(run_id=run, at=0)
    assert "forked from" in played.step("tarry status").output


async def words_coming(command: str, dev: Dev) -> None:
    """Before a reply, the first words of the answer it interrupts, as `tarry watch` shows
    them to a person."""
    if not command.startswith("tarry send"):
        return
    async with asyncio.timeout(COMMAND_TIMEOUT):
        async for event in dev.tarry.get(dev.env["RUN"]).events():
            if event.kind is EventKind.TEXT:
                return


async def test_the_interrupt_tour_cuts_the_answer_short_and_answers_the_reply(
    tmp_path: Path,
) -> None:
    played = await play("interrupt", tmp_path, before=words_coming)
    run = played.variables["RUN"]
    said = [(m.role, m.interrupted) for m in played.transcripts[run]]

    assert all(r.code == 0 for r in played.ran), played.ran
    assert played.states[run].waiting_for is WaitingFor.INPUT
    assert said == [("user", False), ("assistant", True), ("user", False), ("assistant", False)]
    cut = played.transcripts[run][1].content or ""
    assert "Monday at ten" not in cut  # the slow summary never got to its end
    assert (played.states[run].last_assistant_text or "").startswith("The action items only")
    assert "interrupted" in played.step("tarry show").output


async def test_the_guardrails_tour_withholds_a_promise_and_redacts_the_card_number(
    tmp_path: Path,
) -> None:
    played = await play("guardrails", tmp_path)
    run = played.variables["RUN"]
    said = [(m.role, m.content) for m in played.transcripts[run] if m.role != "system"]

    assert all(r.code == 0 for r in played.ran), played.ran
    assert "guarantee" not in str(said).lower()  # the withheld answer is nowhere
    assert "withheld" in played.step("tarry watch").output
    assert ("user", "It was my card <CARD_1>") in said
    answer = "Thank you. I have asked billing to refund the charge on <CARD_1>."
    assert ("assistant", answer) in said  # the model read only the placeholder
    assert "4111" not in played.step("tarry show").output
    assert "no-card-numbers" in played.step("tarry show").output


async def test_the_guardrails_tour_holds_the_legal_threat_until_alice_allows_it(
    tmp_path: Path,
) -> None:
    played = await play("guardrails", tmp_path)
    run = played.variables["RUN"]
    held = played.step(f'tarry send {run} "If it is not back by Friday')
    [threat] = [m for m in played.transcripts[run] if "lawyer" in (m.content or "")]

    assert all(r.code == 0 for r in played.ran), played.ran
    assert held.state.waiting_for is WaitingFor.GUARDRAIL
    assert played.states[run].waiting_for is WaitingFor.INPUT
    [hit] = threat.guardrails
    assert hit.decision is not None
    assert (hit.guardrail, hit.decision.allowed, hit.decision.by) == ("legal-review", True, "alice")
    assert played.transcripts[run][-1].content == (
        "I understand. I have asked our team to call you before Friday."
    )


async def as_alice_with_the_tours_config(command: str, dev: Dev) -> None:
    """What the caps guide asks of the commands' terminal: the tour's config (whose caps
    the CLI, the door that starts a run, reads) and alice as the person."""
    config = tour.config("caps")
    assert config is not None
    dev.env.update(TARRY_CONFIG=str(config), TARRY_USER="alice")


async def test_the_caps_tour_waits_at_alices_cap_until_an_admin_raises_it(
    tmp_path: Path,
) -> None:
    played = await play("caps", tmp_path, before=as_alice_with_the_tours_config)
    run = played.variables["RUN"]
    capped = played.step("tarry status")

    assert all(r.code == 0 for r in played.ran), played.ran
    assert capped.state.waiting_for is WaitingFor.BUDGET
    assert capped.state.warning == "SPEND_CAP_REACHED"
    assert "alice's daily cap" in capped.output
    assert "alice" in played.step("tarry usage").output
    assert played.states[run].waiting_for is WaitingFor.INPUT
    # Both answers, each once (the prompt tokens count the messages' embeddings too).
    assert played.states[run].usage.completion_tokens == 300
    assert (played.states[run].last_assistant_text or "").startswith("Added: we hired")


@pytest.mark.parametrize("name", sorted(tour.TOURS))
def test_a_tours_script_answers_its_first_prompt(name: str) -> None:
    _, commands = guide_stacks(name)
    prompts = [c.prompt for c in tour.script(name).conversations]

    assert any(f'"{prompt}"' in commands[0] for prompt in prompts)


def run_dev(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`tarry dev ARGS` refused before it starts anything (it would serve until Ctrl-C)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TARRY_", "TEMPORAL_"))}
    return subprocess.run(
        [str(Path(sys.executable).parent / "tarry"), "dev", *args],
        env=clean | env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False,
    )  # fmt: skip


def test_a_tour_no_guide_has_is_refused_naming_the_tours() -> None:
    refused = run_dev("--tour", "nope")

    assert refused.returncode == 2
    assert refused.stderr == f"error: --tour 'nope': choose one of {', '.join(tour.TOURS)}\n"


def test_the_teams_tour_refuses_to_replace_the_users_own_config(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text("")

    refused = run_dev("--tour", "teams", TARRY_CONFIG=str(mine))

    assert refused.returncode == 2
    assert "unset TARRY_CONFIG" in refused.stderr


@dataclass
class ConnectsAsAlice:
    """What the OAuth guide asks of a person between its two `tarry watch`es: open the
    connect link the first printed, sign in as alice at the authorization server and agree.
    Through the API's connect and callback with httpx, as a browser follows them
    (tests/test_oauth.py drives that consent in Chromium)."""

    watched: int = 0

    async def __call__(self, command: str, dev: Dev) -> None:
        if not command.startswith("tarry watch"):
            return
        self.watched += 1
        if self.watched != 2:
            return
        path = f"/v1/oauth/connect/{dev.env['RUN']}/{oauth_tour.SERVER}"
        async with httpx.AsyncClient(timeout=COMMAND_TIMEOUT) as browser:
            link = await browser.get(dev.api + path)
            assert link.status_code == 302, link.text
            callback = await oauth_servers.consent(browser, link.headers["location"], "alice")
            finished = await browser.get(callback)
        assert finished.status_code == 200, finished.text


async def test_the_oauth_tour_runs_the_call_as_alice_once_connected_and_waits_again_once_revoked(
    tmp_path: Path,
) -> None:
    played = await play("oauth", tmp_path, before=ConnectsAsAlice())
    run = played.variables["RUN"]
    waited, ran = [r for r in played.ran if r.command.startswith("tarry watch")]
    results = [m.content for m in played.transcripts[run] if m.role == "tool"]

    assert all(r.code == 0 for r in played.ran), played.ran
    assert waited.state.waiting_for is WaitingFor.AUTH
    assert f"/v1/oauth/connect/{run}/tickets" in waited.output
    assert ran.state.waiting_for is WaitingFor.INPUT
    [result] = results  # the call that ran; once revoked, the next waits
    assert '"acting as alice"' in (result or "")  # the MCP server saw alice's grant
    assert "acting as alice" in ran.output, ran.output
    listed = played.step("tarry connections list").output
    assert "tickets" in listed
    assert "openid" in listed
    assert "Revoked" in played.step("tarry connections revoke").output
    assert played.states[run].waiting_for is WaitingFor.AUTH  # the next call, once revoked
    assert "Tour       oauth: docs/guides/acting-as-a-person.md, 'Try it offline'" in played.banner


REMOTE_API_IN_GUIDE = "http://127.0.0.1:8245"
"""The remote stack's API as the A2A guide gives it (`TARRY_API_PORT=8245`)."""


async def test_the_a2a_tour_delegates_to_the_other_stacks_researcher_and_finishes_with_its_answer(
    tmp_path: Path,
) -> None:
    (remote_stack, lead_stack), commands = guide_stacks("a2a")
    bin_dir = Path(sys.executable).parent
    homes = {name: tmp_path / name for name in ("remote", "lead")}
    for home in homes.values():
        home.mkdir()
    async with tarry_dev(homes["remote"], bin_dir, without_settings(remote_stack)) as remote:
        lead_command = lead_stack.replace(REMOTE_API_IN_GUIDE, remote.api)
        async with tarry_dev(homes["lead"], bin_dir, lead_command) as lead:
            ran = [(c, *await shell(c, lead.env, homes["lead"])) for c in commands]
            run = lead.env["RUN"]
            state = await lead.tarry.get(run).state()
            transcript = await lead.tarry.get(run).transcript()
        async with httpx.AsyncClient(base_url=remote.api, timeout=COMMAND_TIMEOUT) as api:
            [remote_run] = (await api.get("/v1/runs")).json()["runs"]
        remote_transcript = await remote.tarry.get(remote_run["id"]).transcript()
    said = {c.split()[1]: output for c, _, output in ran if c.startswith("tarry ")}
    results = [m.content or "" for m in transcript if m.role == "tool"]

    assert all(code == 0 for _, code, _ in ran), ran
    assert state.phase is Phase.COMPLETED
    assert tool_calls(transcript) == ["agent__researcher", "finish"]
    assert "Nobody: notes.md says" in results[0]  # the remote stack's researcher's answer
    assert tool_calls(remote_transcript) == ["read_file"]  # it ran there, on its notes
    assert Phase(remote_run["phase"]) is Phase.COMPLETED
    assert re.search(r"^phase +Completed$", said["status"], re.M), said["status"]
    assert re.search(r"^remote agents +researcher ", said["status"], re.M), said["status"]
    assert "← Nobody: notes.md says" in said["show"]  # the remote's answer, as the call's
    assert "Tour       a2a: docs/guides/a2a.md, 'Try it offline'" in lead.banner
