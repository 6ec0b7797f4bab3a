"""`EvalRun`: a dataset's decision points replayed against a candidate model, scored.

Each point is one model activity (`call_llm`, with the runs' retry policy and failure
codes): the candidate proposes, no tool runs, nobody is asked. A guardrail point is one
check activity instead (`check_guardrails`, with the runs' retries): the candidate
guardrails look at its text. At most `concurrency`
points are asked at once, each under its own activity id (`point-N`), and its score
goes into the workflow's state as soon as its answer is in: a worker that dies
mid-eval loses only the calls in flight, which Temporal retries, and history holds
one scheduled and one completed activity per point. Once the candidate has spent the
eval's budget, no further point is asked (`stopped: "budget"`).

The eval upserts the `TarryPhase` and `TarryModel` search attributes a run has, so
`tarry list` shows it beside the runs.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import (
        ANSWER_TOOL,
        EVAL_REPORT_QUERY,
        EVAL_WORKFLOW,
        LLM_ACTIVITY,
        PHASE_ATTRIBUTE,
        AnswerScorer,
        ChatMessage,
        DecisionPoint,
        ErrorCode,
        ErrorInfo,
        EvalInput,
        EvalReport,
        LlmRequest,
        LlmResponse,
        Phase,
        PointScore,
        Usage,
        Verdict,
    )
    from tarry.contracts.datasets import GuardrailAsk
    from tarry.contracts.guardrails import GUARDRAILS_ACTIVITY, Guarded, GuardRequest
    from tarry.contracts.ledger import ReserveRequest
    from tarry.core import eval_scoring
    from workflows import spend
    from workflows.budgets import exceeded
    from workflows.guardrails import CHECK_RETRY, CHECK_TIMEOUT
    from workflows.model_calls import LLM_RETRY, error_of

BUDGET_STOP = "budget"
SPEND_CAP_STOP = "spend_cap"


class SpendCapped(Exception):
    """The owner's ledger refused a point's call: their daily cap is reached."""

    def __init__(self, refusal: str | None) -> None:
        super().__init__(refusal)
        self.error = ErrorInfo(
            code=ErrorCode.SPEND_CAP_REACHED,
            message=refusal or "the owner's daily cap is reached",
        )


@workflow.defn(name=EVAL_WORKFLOW)
class EvalRunWorkflow:
    """Scores every point of its input once, then returns the report."""

    def __init__(self) -> None:
        self._input: EvalInput | None = None
        self._scores: dict[str, PointScore] = {}
        self._stopped: str | None = None
        self._done = False

    @workflow.run
    async def run(self, input: EvalInput) -> EvalReport:
        self._input = input
        in_flight: set[asyncio.Task[None]] = set()
        started: list[asyncio.Task[None]] = []
        for index, point in enumerate(input.points):
            await workflow.wait_condition(lambda: len(in_flight) < input.concurrency)
            if self._stopped is not None:  # the owner's daily cap
                break
            if exceeded(input.budget, self._spent()):
                self._stopped = BUDGET_STOP
                break
            task = asyncio.create_task(self._score(index, point))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            started.append(task)
        # A bug in scoring fails the workflow task (retried, visible) rather than leaving
        # its point out of the report unnoticed.
        await asyncio.gather(*started)
        self._done = True
        workflow.upsert_search_attributes([PHASE_ATTRIBUTE.value_set(Phase.COMPLETED.value)])
        return self.report()

    @workflow.query(name=EVAL_REPORT_QUERY)
    def report(self) -> EvalReport:
        """The report of the points scored so far."""
        i = self._input
        assert i is not None, "queried before the eval started"
        return eval_scoring.report(
            workflow.info().workflow_id,
            i.dataset,
            i.candidate,
            len(i.points),
            self._scores.values(),
            done=self._done,
            stopped=self._stopped,
            min_agreement=i.min_agreement,
        )

    def _spent(self) -> Usage:
        spent = Usage()
        for s in self._scores.values():
            spent = spent + s.usage
        return spent

    async def _score(self, index: int, point: DecisionPoint) -> None:
        i = self._input
        assert i is not None
        if point.guardrail is not None:
            self._scores[point.id] = await self._check(index, point, point.guardrail)
            return
        assert i.model is not None  # `EvalInput` names a model for every proposal
        tools = [t for t in point.tools if i.tools is None or t.name in i.tools]
        request = LlmRequest(
            profile=i.model,
            system=point.system if i.system is None else i.system,
            messages=point.messages,
            turn=1,
            tool_definitions=tools,
        )
        started = workflow.now()
        score = PointScore(
            id=point.id,
            run_id=point.run_id,
            tool=point.proposal.function.name if point.proposal else ANSWER_TOOL,
            verdict=point.label.verdict,
            agrees=False,
            score=0.0,
            original=point.proposal,
            original_answer=point.answer,
            label=point.label,
            original_usage=point.usage,
            original_latency_ms=point.latency_ms,
        )
        try:
            answer = await self._ask(f"point-{index}", request)
        except ActivityError as e:
            score.error = error_of(e, default=ErrorCode.LLM_HTTP_ERROR)
            self._scores[point.id] = score
            return
        except SpendCapped as e:
            score.error = e.error
            self._scores[point.id] = score
            return
        score.latency_ms = (workflow.now() - started).total_seconds() * 1000
        score.usage = answer.usage
        score.candidate_calls = answer.message.tool_calls or []
        if not score.candidate_calls:
            score.candidate_answer = answer.message.content
        if point.label.verdict is Verdict.ANSWERED:
            try:
                score.agrees = await self._answer_agrees(index, point, score)
            except ActivityError as e:
                score.error = error_of(e, default=ErrorCode.LLM_HTTP_ERROR)
            except SpendCapped as e:  # the judge's call
                score.error = e.error
            score.score = float(score.agrees)
        elif point.proposal is not None:
            score.agrees, score.score = eval_scoring.call_score(
                point, score.candidate_calls, i.tolerance
            )
        self._scores[point.id] = score

    async def _check(self, index: int, point: DecisionPoint, asked: GuardrailAsk) -> PointScore:
        """A guardrail point: its text, checked by the candidate guardrails that look
        where it was, as a run's check is (one activity, `point-N`)."""
        i = self._input
        assert i is not None
        rails = [g for g in i.guardrails or [] if g.on is asked.on]
        score = PointScore(
            id=point.id,
            run_id=point.run_id,
            tool=f"guardrail {asked.guardrail.name}",
            guardrail=asked.guardrail.name,
            verdict=point.label.verdict,
            agrees=False,
            score=0.0,
            label=point.label,
        )
        if rails:
            started = workflow.now()
            try:
                guarded: Guarded = await workflow.execute_activity(
                    GUARDRAILS_ACTIVITY,
                    GuardRequest(text=asked.text, guardrails=rails),
                    result_type=Guarded,
                    activity_id=f"point-{index}",
                    start_to_close_timeout=CHECK_TIMEOUT,
                    retry_policy=CHECK_RETRY,
                    summary=f"eval point-{index} on guardrails",
                )
            except ActivityError as e:
                score.error = error_of(e, default=ErrorCode.GUARDRAIL_UNAVAILABLE)
                return score
            score.latency_ms = (workflow.now() - started).total_seconds() * 1000
            score.candidate_hits = guarded.hits
        score.agrees = eval_scoring.guardrail_agrees(point.label, score.candidate_hits)
        score.score = float(score.agrees)
        return score

    async def _answer_agrees(self, index: int, point: DecisionPoint, score: PointScore) -> bool:
        """The eval's answer scorer on a final answer; the judge's cost counts as the
        point's."""
        i = self._input
        assert i is not None
        if i.scorer is not AnswerScorer.JUDGE or i.judge is None:
            return eval_scoring.answer_agrees(i.scorer, score.candidate_answer, point.answer)
        prompt = eval_scoring.judge_prompt(point, score.candidate_answer)
        request = LlmRequest(
            profile=i.judge,
            system=i.rubric,
            messages=[ChatMessage(role="user", content=prompt)],
            turn=1,
            tool_definitions=[],
        )
        verdict = await self._ask(f"judge-{index}", request)
        score.usage = score.usage + verdict.usage
        return eval_scoring.judge_passes(verdict.message.content)

    async def _ask(self, activity_id: str, request: LlmRequest) -> LlmResponse:
        """The call, reserved on the owner's ledger first when the eval carries their
        daily caps (each call keyed by the eval's id and its activity's: the points' calls
        run at once, and a run's key is one call after another); `SpendCapped` at the
        cap, after which no further point is asked."""
        i = self._input
        assert i is not None
        if i.spend is None:
            return await self._call(activity_id, request)
        reservation = ReserveRequest(
            caps=i.spend,
            run_id=f"{workflow.info().workflow_id}/{activity_id}",
            call=1,
            profile=request.profile,
            lease=i.timeouts.llm_retry_window + spend.LEASE_MARGIN,
        )
        granted = await spend.reserve(reservation)
        if not granted.granted:
            self._stopped = SPEND_CAP_STOP
            raise SpendCapped(granted.refusal)
        answer: LlmResponse | None = None
        try:
            answer = await self._call(activity_id, request)
            return answer
        finally:
            await spend.settle(granted, reservation, spend.spent_by(answer))

    async def _call(self, activity_id: str, request: LlmRequest) -> LlmResponse:
        i = self._input
        assert i is not None
        t = i.timeouts
        answer: LlmResponse = await workflow.execute_activity(
            LLM_ACTIVITY,
            request,
            result_type=LlmResponse,
            activity_id=activity_id,
            start_to_close_timeout=t.llm_attempt,
            heartbeat_timeout=t.llm_heartbeat,
            schedule_to_close_timeout=t.llm_retry_window,
            retry_policy=LLM_RETRY,
            summary=f"eval {activity_id} on {request.profile}",
        )
        return answer
