"""`tarry eval`: a dataset's decision points replayed against a scripted candidate, scored
by what people decided; the report from the CLI and the HTTP API; the CI gate; compare."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from pydantic import SecretStr

from tarry.client.evals import load_points, start_eval, wait_report
from tarry.client.run_list import runs_query
from tarry.config.settings import ModelProfile
from tarry.contracts import (
    ANSWER_TOOL,
    ChatMessage,
    DecisionPoint,
    EvalInput,
    EvalReport,
    Label,
    Verdict,
)
from tarry.core.eval_scoring import closeness, judge_prompt, wilson
from tarry.core.limits import Limits
from tarry.testing.scripted_model import ScriptedModel, call, say
from tests.cli import Cli, until_listed
from tests.conftest import CANARY_KEY, Agent
from tests.deadline import TIMEOUT, deadline
from tests.eval_dataset import DISAGREED, agree_on_all, agree_on_three, write_dataset
from tests.http_api import Api
from tests.test_datasets import EDITED, PLAN, decided_run
from tests.test_http_api import error_of
from tests.test_ledger import ledger_of, person
from tests.test_owners import agui_body


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "decisions.jsonl")


async def evaluate(cli: Cli, dataset: Path, *args: str) -> EvalReport:
    out = await cli.ok("eval", str(dataset), "--model", "default", "--json", *args)
    return EvalReport.model_validate_json(out)


async def test_a_candidate_agreeing_on_three_of_four_decisions_scores_0_75(
    cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)

    report = await evaluate(cli, dataset)

    assert (report.done, report.total, report.scored, report.errors) == (True, 4, 4, 0)
    assert (report.overall.agreed, report.overall.agreement) == (3, 0.75)
    assert report.overall.low < 0.75 < report.overall.high
    assert {t: (r.agreed, r.points) for t, r in report.per_tool.items()} == {
        "list_files": (1, 1),
        "read_file": (1, 1),
        "write_file": (1, 2),
    }
    [missed] = report.disagreements
    assert (missed.id, missed.verdict, missed.score) == (DISAGREED, Verdict.EDITED, 0.5)
    assert missed.original is not None
    assert json.loads(missed.original.function.arguments) == {"path": "b.md", "content": "draft"}
    assert missed.label.arguments == {"path": "b.md", "content": "final"}
    [candidate] = missed.candidate_calls
    assert candidate.function.name == "write_file"
    assert json.loads(candidate.function.arguments) == {"path": "b.md", "content": "draft"}
    # A scripted answer costs 10 tokens a message sent (system, user) and 5 written; the
    # originals recorded 120 tokens and 800 ms each.
    assert report.spend.candidate_usage.total_tokens == 4 * 25
    assert (report.spend.original_usage.total_tokens, report.spend.compared) == (4 * 120, 4)
    assert report.spend.original_latency_ms == 800.0


async def test_a_dataset_of_recorded_decisions_scores_a_candidate_agreeing_on_three_at_0_75(
    agent: Agent,
) -> None:
    # Two calls approved, one rejected, one edited, by people in a recorded run.
    await decided_run(agent)
    cli = Cli.of(agent, TARRY_DATASETS_DIR=str(agent.tarry.datasets.store.root))
    await cli.ok("dataset", "create", "plans", "--from", "tool=write_file")
    # Asked one point at a time, in the dataset's order: the candidate writes the first two
    # plans as approved, leaves the rejected one, writes the edited one as first proposed
    # (its one disagreement), and gives both answers as recorded.
    agent.model.add(
        call("write_file", PLAN | {"path": "1.md"}),
        call("write_file", PLAN | {"path": "2.md"}),
        say("I will leave that one."),
        call("write_file", PLAN | {"path": "4.md"}),
        say("All four handled."),
        say("You're welcome."),
    )

    out = await cli.ok("eval", "plans", "--model", "default", "--concurrency", "1", "--json")
    report = EvalReport.model_validate_json(out)

    decisions = report.per_tool["write_file"]
    assert (decisions.agreed, decisions.points, decisions.agreement) == (3, 4, 0.75)
    assert report.per_tool[ANSWER_TOOL].agreed == report.per_tool[ANSWER_TOOL].points == 2
    [missed] = report.disagreements
    assert (missed.verdict, missed.label.by, missed.label.arguments) == (
        Verdict.EDITED,
        "dave",
        EDITED,
    )
    assert missed.original is not None
    assert json.loads(missed.original.function.arguments) == PLAN | {"path": "4.md"}
    [candidate] = missed.candidate_calls
    assert json.loads(candidate.function.arguments) == PLAN | {"path": "4.md"}


async def test_the_report_is_a_table_with_the_disagreement_and_an_eval_is_listed_as_one(
    cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)
    eval_id = (await evaluate(cli, dataset)).eval_id

    out = await cli.ok("eval", "status", eval_id)

    assert "agreement 0.75" in out
    assert DISAGREED in out
    assert '{"path": "b.md", "content": "final"}' in out  # the person's edit
    await until_listed(agent.tarry.client, runs_query(), eval_id)
    rows = json.loads(await cli.ok("list", "--json", "--limit", "1000"))
    [row] = [r for r in rows if r["run_id"] == eval_id]
    assert (row["kind"], row["phase"], row["model"]) == ("eval", "Completed", "default")


async def test_min_agreement_exits_1_below_the_bar_and_0_at_it(
    cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)

    below = await cli("eval", str(dataset), "--model", "default", "--min-agreement", "0.9")
    at = await cli("eval", str(dataset), "--model", "default", "--min-agreement", "0.75")

    assert below.code == 1, below
    assert "FAIL at 0.9" in below.out
    assert at.code == 0, at
    assert "PASS at 0.75" in at.out


async def test_compare_prints_both_candidates_side_by_side(
    agent_factory: Callable[..., Awaitable[Agent]], dataset: Path
) -> None:
    async with ScriptedModel() as rival:
        key = SecretStr(CANARY_KEY)
        profile = ModelProfile(base_url=rival.base_url, model="scripted", api_key=key)
        agent = await agent_factory(more_profiles={"rival": profile})
        cli = Cli.of(agent)
        agree_on_three(agent.model)
        agree_on_all(rival)
        first = await evaluate(cli, dataset)
        out = await cli.ok("eval", str(dataset), "--model", "rival", "--json")
        second = EvalReport.model_validate_json(out)

        table = await cli.ok("eval", "compare", first.eval_id, second.eval_id)
        both = json.loads(await cli.ok("eval", "compare", first.eval_id, second.eval_id, "--json"))

    assert second.overall.agreement == 1.0
    assert f"{first.eval_id} (default)" in table
    assert f"{second.eval_id} (rival)" in table
    assert "0.75 [0.30, 0.95] (3/4)" in table
    assert "1.00 [0.51, 1.00] (4/4)" in table
    assert (both["a"]["overall"]["agreement"], both["b"]["overall"]["agreement"]) == (0.75, 1.0)


async def test_an_eval_stops_asking_once_it_has_spent_its_budget(
    cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)

    report = await evaluate(cli, dataset, "--concurrency", "1", "--max-tokens", "30")

    # 25 tokens a point: the second point takes the eval past 30, and no third is asked.
    assert (report.stopped, report.scored, report.total) == ("budget", 2, 4)
    assert len(agent.model.requests) == 2


async def test_a_dataset_line_that_is_no_decision_point_is_eval_invalid(
    cli: Cli, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n', encoding="utf-8")

    result = await cli("eval", str(bad), "--model", "default")

    result.assert_one_error_line("error: EVAL_INVALID: ")
    assert result.code == 2
    assert "line 1" in result.err


async def test_the_status_of_an_eval_there_is_not_is_eval_not_found(cli: Cli) -> None:
    result = await cli("eval", "status", "eval-nothing-here")

    result.assert_one_error_line("error: EVAL_NOT_FOUND: ")


async def test_the_api_serves_an_eval_s_report_and_404_for_an_unknown_one(
    api: Api, cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)
    eval_id = (await evaluate(cli, dataset)).eval_id

    found = await api.http.get(f"/v1/evals/{eval_id}")
    missing = await api.http.get("/v1/evals/eval-nothing-here")

    assert found.status_code == 200, found.text
    assert EvalReport.model_validate(found.json()).overall.agreement == 0.75
    assert error_of(missing) == (404, "EVAL_NOT_FOUND")


@pytest.mark.parametrize(
    ("method", "route", "body"),
    [
        ("GET", "", None),
        ("GET", "/transcript", None),
        ("GET", "/timeline", None),
        ("POST", "/messages", {"text": "hello"}),
        ("POST", "/resume", {}),
    ],
)
async def test_an_eval_s_id_on_a_runs_route_is_run_not_found(
    api: Api, cli: Cli, agent: Agent, dataset: Path, method: str, route: str, body: object
) -> None:
    """An eval answers none of a run's queries: its id names no run."""
    agree_on_three(agent.model)
    eval_id = (await evaluate(cli, dataset)).eval_id

    response = await api.http.request(method, f"/v1/runs/{eval_id}{route}", json=body)

    assert error_of(response) == (404, "RUN_NOT_FOUND")


async def test_an_eval_s_id_as_an_ag_ui_thread_is_run_not_found(
    api: Api, cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)
    eval_id = (await evaluate(cli, dataset)).eval_id

    response = await api.http.post("/v1/agui", json=agui_body(eval_id))

    assert error_of(response) == (404, "RUN_NOT_FOUND")


def test_closeness_is_the_share_of_equal_keys_and_1_only_for_json_equal_arguments() -> None:
    assert closeness({"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}) == 1.0
    assert closeness({"a": 1, "b": 2}, {"a": 1, "b": 3}) == 0.5
    assert closeness({"a": 1}, {"a": 1, "c": 3}) == 0.5
    assert closeness("not json", {"a": 1}) == 0.0


def test_the_wilson_interval_of_three_in_four_is_the_textbook_one() -> None:
    low, high = wilson(3, 4)
    assert (round(low, 3), round(high, 3)) == (0.301, 0.954)
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(4, 4)[1] == pytest.approx(1.0)


async def test_a_tool_s_tolerance_counts_an_edit_half_matched_as_agreement(
    cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)

    report = await evaluate(cli, dataset, "--tolerance", "write_file=0.5")
    refused = await cli("eval", str(dataset), "--model", "default", "--tolerance", "write_file")

    assert (report.overall.agreement, report.disagreements) == (1.0, [])
    refused.assert_one_error_line("error: EVAL_INVALID: --tolerance 'write_file'")


ASKED = "What is the capital of France?"
ANSWERED = DecisionPoint(
    id="run-9/1/answer",
    run_id="run-9",
    model="default",
    messages=[ChatMessage(role="user", content=ASKED)],
    answer="Paris",
    label=Label(verdict=Verdict.ANSWERED, reply="Thanks!"),
)


@pytest.mark.parametrize(
    ("scorer", "agrees"), [("exact", False), ("contains", True), ("judge", True)]
)
async def test_a_final_answer_goes_to_the_chosen_scorer(
    cli: Cli, agent: Agent, tmp_path: Path, scorer: str, agrees: bool
) -> None:
    candidate = "It is Paris."
    agent.model.add_conversation(ASKED, say(candidate))
    agent.model.add_conversation(judge_prompt(ANSWERED, candidate), say("PASS: the same city."))
    dataset = tmp_path / "answers.jsonl"
    dataset.write_text(ANSWERED.model_dump_json() + "\n", encoding="utf-8")

    report = await evaluate(
        cli, dataset, "--scorer", scorer, "--judge", "default", "--rubric", "Same facts?"
    )

    assert report.per_tool[ANSWER_TOOL].agreed == int(agrees)
    assert len(agent.model.requests) == (2 if scorer == "judge" else 1)


async def test_status_shows_an_eval_s_progress_while_it_runs(
    cli: Cli, agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model, delay=deadline(2))
    store = agent.tarry.datasets.store
    points = load_points(str(dataset), store)
    input = EvalInput(dataset="decisions", points=points, model="default", concurrency=1)
    handle = await start_eval(agent.tarry.client, agent.tarry.task_queue, "ana", input)

    async def progress() -> EvalReport:
        out = await cli.ok("eval", "status", handle.id, "--json")
        return EvalReport.model_validate_json(out)

    async with asyncio.timeout(TIMEOUT):
        while (midway := await progress()).scored == 0:
            await asyncio.sleep(0.05)
    final = await wait_report(handle)

    assert (midway.done, midway.total) == (False, 4)
    assert 1 <= midway.scored < 4
    assert (final.done, final.scored) == (True, 4)


# --- Under the owner's daily caps (issue 58) ---------------------------------------------


async def capped_eval(agent: Agent, dataset: Path, owner: str, cap: int) -> EvalReport:
    """An eval of `owner`'s, one point at a time, under a daily cap of `cap` tokens."""
    points = load_points(str(dataset), agent.tarry.datasets.store)
    input = EvalInput(dataset="decisions", points=points, model="default", concurrency=1)
    limits = Limits(max_tokens_per_day=cap)
    tarry = agent.tarry
    handle = await start_eval(tarry.client, tarry.task_queue, owner, input, limits=limits)
    return await wait_report(handle)


async def test_an_eval_s_calls_are_reserved_and_settled_on_its_owner_s_daily_cap(
    agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)
    owner = person("ana")

    report = await capped_eval(agent, dataset, owner, cap=1_000_000)

    ledger = await ledger_of(agent.tarry.client, owner)
    assert report.scored == 4
    assert ledger.spent.tokens == 4 * 25  # each point's answer: 25 tokens
    assert ledger.open == {}


async def test_an_eval_at_its_owner_s_daily_cap_asks_no_further_point(
    agent: Agent, dataset: Path
) -> None:
    agree_on_three(agent.model)

    # The first call may take 4,096 tokens (no `max_tokens`): more than the cap.
    report = await capped_eval(agent, dataset, person("ana"), cap=1_000)

    assert report.stopped == "spend_cap"
    assert agent.model.requests == []
