"""Evals from a client: load a dataset (a file or a stored one), start an eval, read its
report.

The CLI (`tarry eval`) and the HTTP API (`GET /evals/{id}`) both read reports through
here, so a report is the same from a shell and a browser.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from tarry.client.audit import record_act
from tarry.client.datasets import NAME_RULE, DatasetStore
from tarry.client.temporal_errors import translated_errors
from tarry.contracts import (
    EVAL_REPORT_QUERY,
    EVAL_WORKFLOW,
    MODEL_ATTRIBUTE,
    OWNER_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    SUMMARY_MEMO,
    Act,
    AnswerScorer,
    DecisionPoint,
    Door,
    ErrorCode,
    EvalInput,
    EvalReport,
    OtherAct,
    Phase,
)
from tarry.core.errors import TarryError
from tarry.core.limits import Limits

__all__ = ["eval_report", "load_points", "start_eval", "wait_report"]


def load_points(
    dataset: str, store: DatasetStore, version: int | None = None
) -> list[DecisionPoint]:
    """The decision points of `dataset`: a file of JSON lines, one `DecisionPoint` a line
    (as `tarry dataset export` writes it), or else a dataset's name in `store` (its
    version `version`, the latest if None)."""
    path = Path(dataset)
    if not path.is_file():
        if not NAME_RULE.fullmatch(dataset) or not store.versions(dataset):
            raise TarryError(
                ErrorCode.DATASET_NOT_FOUND,
                f"no file and no dataset {dataset!r}: give a file of JSON lines or a name"
                " `tarry dataset list` shows",
            )
        return store.points(dataset, version)
    if version is not None:
        raise TarryError(ErrorCode.EVAL_INVALID, "--version picks a stored dataset's, not a file's")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise TarryError(ErrorCode.EVAL_INVALID, f"cannot read dataset {dataset!r}: {e}") from e
    points: list[DecisionPoint] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            points.append(DecisionPoint.model_validate_json(line))
        except ValidationError as e:
            problem = e.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise TarryError(
                ErrorCode.EVAL_INVALID,
                f"{dataset} line {number} is not a decision point: {where}: {problem['msg']}",
            ) from e
    if not points:
        raise TarryError(ErrorCode.EVAL_INVALID, f"dataset {dataset!r} has no decision points")
    return points


async def start_eval(
    client: Client,
    task_queue: str,
    owner: str,
    input: EvalInput,
    eval_id: str | None = None,
    *,
    door: Door = Door.CLI,
    limits: Limits | None = None,
) -> WorkflowHandle[object, EvalReport]:
    """Starts the eval of `input` (id `eval-<random>` unless given): visible in `tarry
    list` as Running on its candidate profile. It is `owner`'s, as a run is its starter's:
    its report holds the dataset's conversations, which the API shows only to those who
    may read it (`tarry.core.ownership`). Its start is recorded in the audit trail as
    `owner`'s, through `door`, readable by whoever may read the eval. `limits`: the
    owner's (`tarry.core.limits`): a candidate or judge profile outside them is refused,
    `MODEL_NOT_ALLOWED`, and a budget over their `max_run_budget` `BUDGET_NOT_ALLOWED`,
    before anything starts; an eval that names no budget has that one, and its calls
    reserve on the owner's daily caps, as a run's do."""
    if input.scorer is AnswerScorer.JUDGE and input.judge is None:
        raise TarryError(ErrorCode.EVAL_INVALID, "the judge scorer needs a judge model profile")
    for profile, what in ((input.model, "the eval"), (input.judge, "the eval's judge")):
        if limits and profile and (refused := limits.model_problem(profile, what)):
            raise refused
    if limits is not None:
        budget = limits.admitted_budget(input.budget, "the eval")
        input = input.model_copy(update={"budget": budget, "spend": limits.daily_caps(owner)})
    attributes = TypedSearchAttributes(
        [
            SearchAttributePair(PHASE_ATTRIBUTE, Phase.RUNNING.value),
            SearchAttributePair(MODEL_ATTRIBUTE, input.candidate),
            SearchAttributePair(OWNER_ATTRIBUTE, owner),
        ]
    )
    handle = await client.start_workflow(
        EVAL_WORKFLOW,
        input,
        id=eval_id or f"eval-{uuid.uuid4().hex[:12]}",
        task_queue=task_queue,
        result_type=EvalReport,
        memo={SUMMARY_MEMO: f"eval of {input.dataset} on {input.candidate}"},
        search_attributes=attributes,
    )
    what = f"started eval {handle.id!r} of {input.dataset!r} ({len(input.points)} points)"
    act = OtherAct(
        act=Act.EVAL, by=owner, door=door, what=f"{what} on {input.candidate!r}", eval=handle.id
    )
    access = TypedSearchAttributes([SearchAttributePair(OWNER_ATTRIBUTE, owner)])
    await record_act(client, act, task_queue, access)
    return handle


async def eval_report(client: Client, eval_id: str) -> EvalReport:
    """The eval's report: final once it has ended, its progress so far before (which a
    worker answers: `RUN_NOT_SERVED` without one)."""
    handle = client.get_workflow_handle(eval_id, result_type=EvalReport)
    try:
        async with translated_errors(eval_id):
            description = await handle.describe()
            if description.workflow_type != EVAL_WORKFLOW:
                raise TarryError(ErrorCode.EVAL_NOT_FOUND, f"{eval_id!r} is a run, not an eval")
            if description.status is WorkflowExecutionStatus.COMPLETED:
                final: EvalReport = await handle.result()
                return final
            report: EvalReport = await handle.query(EVAL_REPORT_QUERY, result_type=EvalReport)
            return report
    except TarryError as e:
        if e.code is not ErrorCode.RUN_NOT_FOUND:
            raise
        raise TarryError(ErrorCode.EVAL_NOT_FOUND, f"no eval {eval_id!r}") from e


async def wait_report(handle: WorkflowHandle[object, EvalReport]) -> EvalReport:
    """The report of an eval once it has scored every point it will."""
    return await handle.result()
