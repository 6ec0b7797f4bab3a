"""`tarry eval`: replay a dataset's decision points against a candidate model and score it
by what people approved (`workflows/eval_run.py`, `tarry.core.eval_scoring`).

`tarry eval DATASET --model PROFILE` starts an eval and waits for its report;
`--min-agreement` makes it a CI gate (exit 1 below the bar). `tarry eval status ID`
shows an eval's report so far, `tarry eval compare A B` two evals of one dataset side
by side. Each command imports the evals' machinery (`tarry.client.evals`, over the Temporal
client) when it runs, so `tarry --help` does not load it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Group
from rich.table import Table
from rich.text import Text
from typer._click import Context  # typer's own click, whose Context its groups take
from typer.core import TyperGroup

from tarry.cli.common import AsJson, console, emit, fail, output, with_tarry
from tarry.cli.dataset import Version
from tarry.client.dataset_store import DatasetStore
from tarry.contracts import (
    AnswerScorer,
    Budget,
    DecisionPoint,
    ErrorCode,
    EvalInput,
    EvalReport,
    Rate,
)
from tarry.contracts.guardrails import Guardrail
from tarry.core.errors import TarryError
from tarry.temporal.entrypoint import settings_or_exit

if TYPE_CHECKING:
    from tarry.client import Tarry

__all__ = ["commands"]

BELOW_BAR_EXIT = 1


class _DefaultToRun(TyperGroup):
    """`tarry eval DATASET ...` is `tarry eval run DATASET ...`: a first word that names
    no subcommand is a dataset."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


commands = typer.Typer(
    name="eval",
    cls=_DefaultToRun,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="Score a candidate model or prompt on a dataset of people's decisions:"
    " `tarry eval DATASET --model PROFILE`, `status`, `compare`.",
)

EvalId = Annotated[str, typer.Argument(metavar="EVAL", help="The eval id `tarry eval` printed.")]


@commands.command()
def run(
    dataset: Annotated[
        str,
        typer.Argument(
            metavar="DATASET",
            help="A dataset's name (`tarry dataset list`), or a file of JSON lines as exported.",
        ),
    ],
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="The candidate model profile, for the dataset's proposals and answers."
        ),
    ] = None,
    guardrails: Annotated[
        Path | None,
        typer.Option(
            "--guardrails",
            metavar="FILE",
            help="A candidate guardrail setup (a JSON list, as `tarry start --guardrails`"
            " takes), for the texts of the dataset's guardrail points.",
        ),
    ] = None,
    system: Annotated[
        Path | None,
        typer.Option(help="A file whose text replaces each point's system prompt."),
    ] = None,
    tools: Annotated[
        list[str] | None, typer.Option("--tools", help="Offer only these tools (repeat it).")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Points asked at once.")] = 4,
    min_agreement: Annotated[
        float | None,
        typer.Option(min=0, max=1, help="Exit 1 when the agreement is below this."),
    ] = None,
    scorer: Annotated[
        AnswerScorer, typer.Option(help="How final answers are scored.")
    ] = AnswerScorer.EXACT,
    judge: Annotated[
        str | None, typer.Option(help="The judge's model profile, for `--scorer judge`.")
    ] = None,
    rubric: Annotated[str | None, typer.Option(help="What the judge is told to look for.")] = None,
    tolerance: Annotated[
        list[str] | None,
        typer.Option(
            metavar="TOOL=X",
            help="Count a call of TOOL as the same at this closeness of its arguments (0-1);"
            " repeat it. Unnamed tools need JSON-equal arguments.",
        ),
    ] = None,
    max_cost: Annotated[
        float | None, typer.Option(help="Stop asking once the candidate spent this (USD).")
    ] = None,
    max_tokens: Annotated[
        int | None, typer.Option(help="Stop asking once the candidate spent these tokens.")
    ] = None,
    version: Version = None,
    as_json: AsJson = False,
) -> None:
    """Replay DATASET against a candidate and print its report, once every point is scored."""
    from tarry.client.evals import load_points, start_eval, wait_report

    try:
        tolerances = _tolerances(tolerance or [])
        store = DatasetStore.of(settings_or_exit())
        points = _scored(load_points(dataset, store, version), model, guardrails)
        candidates = _guardrails(guardrails)
        prompt = system.read_text(encoding="utf-8") if system else None
    except TarryError as e:
        fail(f"{e.code}: {e.message}", exit_code=2)
    except OSError as e:
        fail(str(e), exit_code=2)
    budget = Budget(max_cost_usd=max_cost, max_total_tokens=max_tokens)
    input = EvalInput(
        dataset=Path(dataset).name if version is None else f"{dataset} version {version}",
        points=points,
        model=model,
        guardrails=candidates,
        system=prompt,
        tools=tools or None,
        concurrency=concurrency,
        tolerance=tolerances,
        budget=budget if max_cost or max_tokens else None,
        scorer=scorer,
        judge=judge,
        rubric=rubric,
        min_agreement=min_agreement,
    )

    async def evaluate(tarry: Tarry) -> EvalReport:
        caller = tarry.caller
        handle = await start_eval(
            tarry.client,
            tarry.task_queue,
            caller.user,
            input,
            door=caller.door,
            limits=caller.limits,
        )
        if not as_json:
            console.print(f"eval {handle.id}: {len(points)} points on {input.candidate}")
        return await wait_report(handle)

    report = with_tarry(evaluate)
    output(report, as_json, view(report))
    if min_agreement is not None and report.overall.agreement < min_agreement:
        raise typer.Exit(BELOW_BAR_EXIT)


def _scored(
    points: list[DecisionPoint], model: str | None, guardrails: Path | None
) -> list[DecisionPoint]:
    """The points the candidates score: proposals and answers with a `--model`, the
    texts guardrails asked about with `--guardrails`."""
    scored = [p for p in points if (model if p.guardrail is None else guardrails) is not None]
    if not scored:
        raise TarryError(
            ErrorCode.EVAL_INVALID,
            "no point of the dataset has its candidate: give --model PROFILE for its"
            " proposals and answers, --guardrails FILE for its guardrails' texts",
        )
    return scored


def _guardrails(path: Path | None) -> list[Guardrail] | None:
    """`--guardrails FILE`: the candidate guardrails."""
    if path is None:
        return None
    try:
        return TypeAdapter(list[Guardrail]).validate_json(path.read_bytes())
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TarryError(
            ErrorCode.EVAL_INVALID, f"--guardrails {path}: {where}: {first['msg']}"
        ) from e


def _tolerances(given: list[str]) -> dict[str, float]:
    """`--tolerance TOOL=X` options as the eval's per-tool tolerance."""
    tolerances: dict[str, float] = {}
    for entry in given:
        tool, _, value = entry.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not tool or not 0 <= number <= 1:
            raise TarryError(
                ErrorCode.EVAL_INVALID, f"--tolerance {entry!r}: give TOOL=X, X from 0 to 1"
            )
        tolerances[tool] = number
    return tolerances


@commands.command()
def status(eval_id: EvalId, as_json: AsJson = False) -> None:
    """An eval's report: its progress so far, or the final one."""
    from tarry.client.evals import eval_report

    report = with_tarry(lambda tarry: eval_report(tarry.client, eval_id))
    output(report, as_json, view(report))


@commands.command()
def compare(a: EvalId, b: EvalId, as_json: AsJson = False) -> None:
    """Two evals of one dataset side by side: overall and per tool."""
    from tarry.client.evals import eval_report

    async def both(tarry: Tarry) -> tuple[EvalReport, EvalReport]:
        first, second = await eval_report(tarry.client, a), await eval_report(tarry.client, b)
        if first.dataset != second.dataset:
            raise TarryError(
                ErrorCode.EVAL_INVALID,
                f"{a} is of {first.dataset!r} and {b} of {second.dataset!r}: compare evals"
                " of one dataset",
            )
        return first, second

    first, second = with_tarry(both)
    if as_json:
        emit({"a": first, "b": second})
        return
    console.print(_comparison(first, second))


def _rate(rate: Rate | None) -> str:
    if rate is None:
        return "-"
    return f"{rate.agreement:.2f} [{rate.low:.2f}, {rate.high:.2f}] ({rate.agreed}/{rate.points})"


def view(report: EvalReport) -> Group:
    """The report for people: agreement per tool, spend, and every disagreement."""
    progress = "done" if report.done else "running"
    if report.stopped:
        progress = f"stopped on its {report.stopped.replace('_', ' ')}"  # spend cap
    gate = ""
    if report.min_agreement is not None:
        passed = report.overall.agreement >= report.min_agreement
        gate = f"  {'PASS' if passed else 'FAIL'} at {report.min_agreement:g}"
    head = (
        f"eval {report.eval_id}: {report.dataset} on {report.model}, {progress}, "
        f"{report.scored}/{report.total} scored, {report.errors} failed\n"
        f"agreement {_rate(report.overall)}{gate}"
    )
    rates = Table("tool", "agreement [95% Wilson]", title="Per tool", title_justify="left")
    for tool, rate in report.per_tool.items():
        rates.add_row(tool, _rate(rate))
    guarded = Table(
        "guardrail",
        "agreement [95% Wilson]",
        "false alarms",
        "misses",
        title="Per guardrail",
        title_justify="left",
        caption="false alarms: flagged what people allowed; misses: let through what they"
        " blocked or edited",
        caption_justify="left",
    )
    for name, g in report.per_guardrail.items():
        guarded.add_row(name, _rate(g), str(g.flagged_allowed), str(g.missed_blocked))
    s = report.spend
    spend = Table("", "candidate", "original", title="Cost and latency", title_justify="left")
    spend.add_row("tokens", str(s.candidate_usage.total_tokens), str(s.original_usage.total_tokens))
    spend.add_row(
        "cost (USD)", f"{s.candidate_usage.cost_usd:.4f}", f"{s.original_usage.cost_usd:.4f}"
    )
    spend.add_row("mean latency (ms)", _ms(s.candidate_latency_ms), _ms(s.original_latency_ms))
    lines = [f"Disagreements ({len(report.disagreements)})"]
    for d in report.disagreements:
        decision = d.verdict.value + (f" by {d.label.by}" if d.label.by else "")
        decision += f" ({d.label.reason})" if d.label.reason else ""
        if d.label.arguments is not None:
            decision += f" to {json.dumps(d.label.arguments)}"
        original = (
            f"{d.original.function.name} {d.original.function.arguments}"
            if d.original
            else d.original_answer or ""
        )
        calls = d.candidate_calls
        candidate = "; ".join(f"{c.function.name} {c.function.arguments}" for c in calls)
        if d.guardrail is not None:
            original = f"asked by guardrail {d.guardrail!r}"
            candidate = ", ".join(f"{h.guardrail} {h.verdict}" for h in d.candidate_hits)
        lines += [
            f"- {d.id}: {decision}",
            f"    original:  {original}",
            f"    candidate: {candidate or d.candidate_answer or '(nothing)'}",
        ]
    # Lines, not a table: a proposal's arguments stay whole and greppable at any width.
    # A report of guardrails alone has no tool to show, and one of a model no guardrail.
    tables = [rates] if report.per_tool or not report.per_guardrail else []
    tables += [guarded] if report.per_guardrail else []
    return Group(head, *tables, spend, Text("\n".join(lines)))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _comparison(a: EvalReport, b: EvalReport) -> Table:
    table = Table("", f"{a.eval_id} ({a.model})", f"{b.eval_id} ({b.model})", title=a.dataset)
    table.add_row("overall", _rate(a.overall), _rate(b.overall))
    for tool in sorted(a.per_tool.keys() | b.per_tool.keys()):
        table.add_row(tool, _rate(a.per_tool.get(tool)), _rate(b.per_tool.get(tool)))
    table.add_row(
        "cost (USD)",
        f"{a.spend.candidate_usage.cost_usd:.4f}",
        f"{b.spend.candidate_usage.cost_usd:.4f}",
    )
    table.add_row(
        "mean latency (ms)", _ms(a.spend.candidate_latency_ms), _ms(b.spend.candidate_latency_ms)
    )
    return table
