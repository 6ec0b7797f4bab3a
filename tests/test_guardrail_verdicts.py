"""Learning from people's verdicts on guardrails (issue 56, item 6): each text a guardrail
asked a person about is a decision point of `tarry dataset create`, labelled with what
they decided, and `tarry eval --guardrails` scores a candidate setup against them, per
guardrail: how often it agreed, flagged what people allowed, or missed what they blocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tarry.client import RunHandle
from tarry.client.run_list import runs_query
from tarry.contracts import ApprovalDefault, DecisionPoint, EvalReport, Verdict, WaitingFor
from tarry.core.identities import Caller
from tarry.testing.scripted_model import say
from tests.cli import Cli, until_listed
from tests.conftest import Agent
from tests.test_guardrail_asks import SECRETS, held
from tests.test_sub_agents import until

REPLIES = ("a secret for you", "the secret plan", "the secret code is 42")
"""What alice sends under `SECRETS`, which asks about each: she allows the first, edits
the second and blocks the third."""


def deny(*words: str) -> dict[str, Any]:
    """A candidate: an input guardrail that blocks `words`."""
    return {
        "name": "candidate",
        "on": "input",
        "check": "pattern",
        "verdict": "block",
        "deny": words,
    }


async def decided_by_alice(agent: Agent) -> RunHandle:
    """A run whose three replies `SECRETS` held, each decided by alice (`REPLIES`)."""
    agent.model.add(say("Noted."), say("Noted."), say("Noted."))
    run = await agent.start(REPLIES[0], guardrails=[SECRETS])
    alice = agent.tarry.get(run.id, Caller("alice"))
    await held(run)
    await alice.decide()
    await alice.send(REPLIES[1])  # answered at its next stop point: the guardrail's wait
    await held(run)
    await alice.decide(arguments={"text": "the plan"})
    await alice.send(REPLIES[2])
    await held(run)
    await alice.decide(approved=False, reason="no codes")
    await until_listed(agent.tarry.client, runs_query(task_queue=agent.tarry.task_queue), run.id)
    return run


async def guardrail_points(agent: Agent) -> list[DecisionPoint]:
    await agent.tarry.datasets.create("verdicts")
    return [p for p in agent.tarry.datasets.points("verdicts") if p.guardrail is not None]


async def test_a_dataset_holds_each_text_a_guardrail_asked_about_with_the_person_s_verdict(
    agent: Agent,
) -> None:
    run = await decided_by_alice(agent)

    points = await guardrail_points(agent)

    assert [(p.label.verdict, p.label.by, p.label.reason) for p in points] == [
        (Verdict.APPROVED, "alice", None),
        (Verdict.EDITED, "alice", None),
        (Verdict.REJECTED, "alice", "no codes"),
    ]
    assert [p.guardrail.text for p in points if p.guardrail] == list(REPLIES)
    assert {(p.guardrail.guardrail.name, p.guardrail.on) for p in points if p.guardrail} == {
        ("ask-secrets", "input")
    }
    assert [p.id.rsplit("/", 1)[1] for p in points] == ["guardrail-1", "guardrail-2", "guardrail-3"]
    assert {p.run_id for p in points} == {run.id}


async def test_a_text_its_deadline_decided_is_no_point(agent: Agent) -> None:
    agent.model.add(say("Noted."))
    rails = [{**SECRETS, "timeout": 1}]
    run = await agent.start(
        "a secret for you", guardrails=rails, approval_default=ApprovalDefault.APPROVE
    )
    await until(run, lambda s: s.waiting_for is WaitingFor.INPUT)
    await until_listed(agent.tarry.client, runs_query(task_queue=agent.tarry.task_queue), run.id)

    assert await guardrail_points(agent) == []


async def exported(agent: Agent, tmp_path: Path) -> Path:
    """The dataset of `decided_by_alice`'s run, as `tarry dataset export` writes it."""
    await decided_by_alice(agent)
    await agent.tarry.datasets.create("verdicts")
    path = tmp_path / "verdicts.jsonl"
    path.write_text(agent.tarry.datasets.export("verdicts"))
    return path


async def eval_guardrails(
    cli: Cli, dataset: Path, *candidate: dict[str, Any], as_json: bool = True
) -> str:
    setup = dataset.with_name("candidate.json")
    setup.write_text(json.dumps(candidate))
    return await cli.ok("eval", str(dataset), "--guardrails", str(setup), *["--json"] * as_json)


async def test_a_candidate_that_flags_every_text_agrees_but_for_the_one_people_allowed(
    cli: Cli, agent: Agent, tmp_path: Path
) -> None:
    dataset = await exported(agent, tmp_path)

    out = await eval_guardrails(cli, dataset, deny("secret"))

    report = EvalReport.model_validate_json(out)
    rate = report.per_guardrail["ask-secrets"]
    assert (rate.points, rate.agreed, rate.flagged_allowed, rate.missed_blocked) == (3, 2, 1, 0)
    [flagged] = report.disagreements
    assert flagged.label.verdict is Verdict.APPROVED
    assert [h.guardrail for h in flagged.candidate_hits] == ["candidate"]
    assert report.per_tool == {}
    assert len(agent.model.requests) == 3  # the runs' own: no model is asked by the eval


async def test_a_candidate_that_misses_the_edited_text_counts_it_missed(
    cli: Cli, agent: Agent, tmp_path: Path
) -> None:
    dataset = await exported(agent, tmp_path)

    out = await eval_guardrails(cli, dataset, deny("code"))

    report = EvalReport.model_validate_json(out)
    rate = report.per_guardrail["ask-secrets"]
    assert (rate.points, rate.agreed, rate.flagged_allowed, rate.missed_blocked) == (3, 2, 0, 1)
    [missed] = report.disagreements
    assert missed.label.verdict is Verdict.EDITED


async def test_the_report_shows_each_guardrail_s_agreement_and_how_it_disagreed(
    cli: Cli, agent: Agent, tmp_path: Path
) -> None:
    dataset = await exported(agent, tmp_path)

    out = await eval_guardrails(cli, dataset, deny("secret"), as_json=False)

    [row] = [line.split("│") for line in out.splitlines() if line.startswith("│ ask-secrets")]
    assert [cell.strip() for cell in row[3:5]] == ["1", "0"]  # one false alarm, no miss
    assert "asked by guardrail 'ask-secrets'" in out


async def test_an_eval_with_no_candidate_for_the_dataset_s_points_is_eval_invalid(
    cli: Cli, agent: Agent, tmp_path: Path
) -> None:
    await decided_by_alice(agent)
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(p.model_dump_json() + "\n" for p in await guardrail_points(agent)))

    refused = await cli("eval", str(texts), "--model", "default")

    assert refused.code == 2
    assert "EVAL_INVALID" in refused.err
    assert "--guardrails FILE" in refused.err
