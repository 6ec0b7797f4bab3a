"""Tarry's own metrics, recorded through the SDK's metric meter.

They land wherever the worker's `Runtime` sends the SDK's metrics (the Prometheus
endpoint `TARRY_METRICS_PORT` opens, see `workers.telemetry`), beside the SDK's own and
with their labels (`namespace`, `task_queue`, `activity_type`). Without a configured
runtime the meter is a no-op: recording costs nothing and never fails a call.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from tarry.contracts import LlmResponse, ToolResult
from tarry.contracts.guardrails import GuardrailHit


def model_answered(
    profile: str, fallback_of: str | None, answer: LlmResponse, elapsed: timedelta
) -> None:
    """One model call that answered: its latency, tokens and estimated cost; labelled
    with the run's own profile where `profile` is its fallback (`fallback_of`), and
    `cached` where the response cache answered (at no cost)."""
    meter = activity.metric_meter().with_additional_attributes(
        {
            "profile": profile,
            "model": answer.model or "unknown",
            "fallback_of": fallback_of or "",
            "cached": "true" if answer.cached else "false",
        }
    )
    meter.create_counter("tarry_model_calls", "Model calls, by outcome").add(1, {"outcome": "ok"})
    meter.create_histogram_timedelta(
        "tarry_model_latency", "How long a model call took, streaming included", "ms"
    ).record(elapsed)
    tokens = meter.create_counter("tarry_model_tokens", "Tokens of model calls, by kind")
    tokens.add(answer.usage.prompt_tokens, {"kind": "prompt"})
    tokens.add(answer.usage.completion_tokens, {"kind": "completion"})
    # A histogram: counters take whole numbers, and its sum is the total cost.
    meter.create_histogram_float(
        "tarry_model_cost_usd", "Estimated cost of a model call, from the profile's prices", "usd"
    ).record(answer.usage.cost_usd)


def model_failed(profile: str, fallback_of: str | None, error: BaseException) -> None:
    """One model call attempt that failed, by its error code."""
    outcome = error.type if isinstance(error, ApplicationError) and error.type else "error"
    meter = activity.metric_meter().with_additional_attributes(
        {"profile": profile, "fallback_of": fallback_of or "", "cached": "false"}
    )
    meter.create_counter("tarry_model_calls", "Model calls, by outcome").add(
        1, {"outcome": outcome, "model": "unknown"}
    )


def guardrails_hit(hits: list[GuardrailHit]) -> None:
    """One check of a text: each guardrail that found something, and what it did."""
    counter = activity.metric_meter().create_counter(
        "tarry_guardrail_hits", "Texts a guardrail redacted or blocked, by guardrail and verdict"
    )
    for hit in hits:
        counter.add(1, {"guardrail": hit.guardrail, "verdict": hit.verdict.value})


def tool_called(tool: str, result: ToolResult) -> None:
    """One tool call: `ok`, or the error code its failed result carries."""
    outcome = "ok" if result.ok or result.error is None else str(result.error.code)
    activity.metric_meter().create_counter("tarry_tool_calls", "Tool calls, by outcome").add(
        1, {"tool": tool, "outcome": outcome}
    )
