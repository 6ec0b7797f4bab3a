"""The options of a run's input, which `tarry start` and `tarry schedule create` both
take: declared once, read into a `RunInput` by one function (`run_input`), so a scheduled
run is started with exactly what a person would type."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from tarry.cli.common import fail, one_of, read
from tarry.contracts import ApprovalDefault, Budget, Mode, ReplyPolicy, RunInput, Sampling
from tarry.contracts.memories import MemoryAccess
from tarry.core.text import shorten

Prompt = Annotated[
    str,
    typer.Argument(
        metavar="PROMPT", help="The first message; `-` reads stdin; empty waits for one."
    ),
]
ModelOption = Annotated[str, typer.Option("--model", help="The model profile the workers use.")]
SystemOption = Annotated[str | None, typer.Option("--system", help="A system prompt.")]
ToolsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--tools",
        "--tool",
        metavar="NAMES",
        help="The tools the run may use, comma-separated or repeated; all if not given.",
    ),
]
AgentsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--agents",
        "--agent",
        metavar="NAMES",
        help="Sub-agents of the workers' config ([agents.NAME]) the run may hand tasks to,"
        " comma-separated or repeated.",
    ),
]
ModeOption = Annotated[
    str,
    typer.Option(
        "--mode",
        metavar="chat|task",
        help="chat waits for you after each answer; task ends on one.",
    ),
]
RequireApprovalOption = Annotated[
    list[str] | None,
    typer.Option(
        "--require-approval",
        metavar="NAMES",
        help="Tools whose calls wait for your decision (`tarry approve`), comma-separated"
        " or repeated; `*` is every tool.",
    ),
]
ApproverOption = Annotated[
    list[str] | None,
    typer.Option(
        "--approver",
        metavar="TOOL=WHO",
        help="Who may decide a tool's calls: users and groups ([api.groups]),"
        " comma-separated (`write_file=ops,alice`); `*=WHO` for the tools not named;"
        " repeated for more tools. Anyone if not given.",
    ),
]
RuleOption = Annotated[
    list[str] | None,
    typer.Option(
        "--rule",
        metavar="TOOL[:POINTER=GLOB]:DECISION[:REASON]",
        help="An approval rule: calls of TOOL whose argument at the JSON pointer fits the"
        " glob (`~=` for a regular expression) are decided approve, reject (the model reads"
        " REASON) or ask: `write_file:/path=notes/*.md:approve`. Repeated: the first rule"
        " that matches decides; after those of --rules.",
    ),
]
RulesOption = Annotated[
    Path | None,
    typer.Option(
        "--rules",
        metavar="FILE",
        help="Approval rules from a JSON file: a list of {tool, when, decision, reason}"
        ' (`when` maps JSON pointers to a glob or {"regex": ...}).',
    ),
]
GuardrailOption = Annotated[
    list[str] | None,
    typer.Option(
        "--guardrail",
        metavar="ON:CHECK:VERDICT[:PATTERN]",
        help="A guardrail: where it looks (input, output, tool_result), what it looks for"
        " (pii, pattern) and what it does on a hit (redact, block, ask): `input:pii:redact`,"
        " `tool_result:pattern:block:(?i)ignore previous instructions`; `ask=bob,ops` asks"
        " those users or groups (anyone who may decide, without `=`). Repeated: they"
        " apply in order, after those of --guardrails.",
    ),
]
GuardrailsOption = Annotated[
    Path | None,
    typer.Option(
        "--guardrails",
        metavar="FILE",
        help="Guardrails from a JSON file: a list of {name, on, check, verdict, reason,"
        " patterns, deny, kinds, fail_open, approvers, timeout}.",
    ),
]
MemoryOption = Annotated[
    str,
    typer.Option(
        "--memory",
        metavar="off|read|read-write",
        help="Memory across runs: read offers the tool recall; read-write remember and"
        " forget too (gate them with --rule remember:ask).",
    ),
]
MemoryScopeOption = Annotated[
    str | None,
    typer.Option(
        "--memory-scope",
        metavar="SCOPE",
        help="Whose memories: a user, group:NAME or agent:NAME; the run's owner if not given.",
    ),
]
ReplyPolicyOption = Annotated[
    str,
    typer.Option(
        "--on-reply-while-running",
        metavar="queue|interrupt|reject",
        help="What a reply does while the agent works: waits its turn, cuts the model"
        " call short, or is refused.",
    ),
]
ApprovalTimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--approval-timeout",
        metavar="DURATION",
        help="How long a gated call waits for a decision, in seconds or ISO 8601"
        " (`P7D`); forever if not given.",
    ),
]
ApprovalDefaultOption = Annotated[
    str,
    typer.Option(
        "--approval-default",
        metavar="reject|approve",
        help="What a gated call nobody decided on gets at its deadline.",
    ),
]
MaxTurnsOption = Annotated[
    int,
    typer.Option(
        "--max-turns",
        min=1,
        metavar="N",
        help="Model calls since your last reply before the run asks you to go on.",
    ),
]
MaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--max-tokens", metavar="N", help="A budget: the run waits once it has spent N tokens."
    ),
]
MaxCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-cost", metavar="USD", help="A budget: the run waits once it has cost this much."
    ),
]
ToolChoiceOption = Annotated[
    str | None,
    typer.Option(
        "--tool-choice",
        metavar="auto|required|none|TOOL",
        help="Whether the model must call a tool (required), one tool (its name), or none;"
        " the profile's setting if not given.",
    ),
]
DEFAULT_MAX_TURNS: int = RunInput.model_fields["max_turns"].default


def run_input(
    prompt: str,
    *,
    model: str,
    system: str | None,
    tools: list[str] | None,
    agents: list[str] | None,
    mode: str,
    require_approval: list[str] | None,
    approver: list[str] | None,
    approval_timeout: str | None,
    approval_default: str,
    max_turns: int,
    max_tokens: int | None,
    max_cost: float | None,
    tool_choice: str | None,
    on_reply_while_running: str,
    rule: list[str] | None,
    rules: Path | None,
    guardrail: list[str] | None = None,
    guardrails: Path | None = None,
    memory: str = MemoryAccess.OFF,
    memory_scope: str | None = None,
) -> RunInput:
    """The run input the run options give; a bad one is one error line, exit code 2."""
    try:
        return RunInput(
            prompt=read(prompt),
            model=model,
            system=system,
            tools=_names(tools),
            agents=_names(agents) or [],
            mode=one_of("--mode", mode, Mode),
            require_approval=_names(require_approval) or [],
            approvers=_approvers(approver or []),
            approval_timeout=_duration(approval_timeout),
            approval_default=one_of("--approval-default", approval_default, ApprovalDefault),
            max_turns=max_turns,
            budget=None
            if max_tokens is None and max_cost is None
            else Budget(max_total_tokens=max_tokens, max_cost_usd=max_cost),
            sampling=None if tool_choice is None else Sampling(tool_choice=tool_choice),
            on_reply_while_running=one_of(
                "--on-reply-while-running", on_reply_while_running, ReplyPolicy
            ),
            approval_rules=[*_json_list("--rules", rules), *map(_rule, rule or [])],
            guardrails=[*_json_list("--guardrails", guardrails), *map(_guardrail, guardrail or [])],
            memory_access=one_of("--memory", memory, MemoryAccess),
            memory_scope=memory_scope,
        )
    except ValidationError as e:
        fail(_validation_message(e), exit_code=2)


def _names(values: list[str] | None) -> list[str] | None:
    """`--tools a,b --tools c` as `["a", "b", "c"]`; None when the option is not given."""
    if values is None:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _approvers(entries: list[str]) -> dict[str, list[str]]:
    """`--approver TOOL=WHO,...` options as `RunInput.approvers`."""
    approvers: dict[str, list[str]] = {}
    for entry in entries:
        tool, _, who = entry.partition("=")
        names = _names([who])
        if not tool.strip() or not names:
            fail(f"--approver {entry!r}: give TOOL=USER_OR_GROUP[,...], e.g. write_file=ops", 2)
        approvers.setdefault(tool.strip(), []).extend(names)
    return approvers


_RULE = re.compile(
    r"(?P<tool>[^:]+)(?::(?P<when>.*?))?:(?P<decision>approve|reject|ask)(?::(?P<reason>.*))?",
    re.DOTALL,
)


def _rule(text: str) -> dict[str, Any]:
    """`--rule TOOL[:POINTER=GLOB]:DECISION[:REASON]` as an approval rule, to validate with
    the rest of the input; `POINTER~=REGEX` for a regular expression."""
    found = _RULE.fullmatch(text)
    if found is None:
        fail(
            f"--rule {text!r}: give TOOL[:POINTER=GLOB]:approve|reject|ask[:REASON],"
            " e.g. write_file:/path=notes/*.md:approve",
            exit_code=2,
        )
    rule: dict[str, Any] = {"tool": found["tool"], "decision": found["decision"]}
    if found["reason"] is not None:
        rule["reason"] = found["reason"]
    if (when := found["when"]) is not None:
        pointer, equals, pattern = when.partition("=")
        if not equals:
            fail(f"--rule {text!r}: give the condition as POINTER=GLOB or POINTER~=REGEX", 2)
        # A pointer never ends in a bare `~` (it escapes as `~0`): `~=` is unambiguous.
        regex = pointer.endswith("~")
        rule["when"] = {pointer[:-1]: {"regex": pattern}} if regex else {pointer: pattern}
    return rule


def _guardrail(text: str) -> dict[str, Any]:
    """`--guardrail ON:CHECK:VERDICT[:PATTERN]` as a guardrail named after them, to
    validate with the rest of the input; `ask=NAME,...` names its approvers."""
    on, check, verdict, *pattern = text.split(":", 3)
    if not (on and check and verdict) or (check == "pattern") != bool(pattern):
        fail(
            f"--guardrail {text!r}: give ON:CHECK:VERDICT, or ON:pattern:VERDICT:REGEX,"
            " e.g. input:pii:redact",
            exit_code=2,
        )
    verdict, asks, approvers = verdict.partition("=")
    guardrail: dict[str, Any] = {
        "name": f"{on}-{check}",
        "on": on,
        "check": check,
        "verdict": verdict,
    }
    if asks:
        guardrail["approvers"] = [name for name in approvers.split(",") if name]
    return guardrail | ({"patterns": pattern} if pattern else {})


def _json_list(option: str, path: Path | None) -> list[Any]:
    """`--rules FILE`, `--guardrails FILE`: its JSON list, to validate with the rest of
    the input."""
    if path is None:
        return []
    try:
        items = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        fail(f"{option} {path}: {e}", exit_code=2)
    if not isinstance(items, list):
        fail(f"{option} {path}: give a JSON list, [{{...}}, ...]", exit_code=2)
    return items


def _duration(text: str | None) -> float | str | None:
    """`--approval-timeout`: seconds (`90`, `0.5`) as a number, anything else (`P7D`) as
    ISO 8601 text for pydantic to read."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return text


def _validation_message(error: ValidationError) -> str:
    """The first problem of `error` as one line: `--approval-timeout: ...`."""
    first = error.errors()[0]
    option = "--" + "-".join(str(part) for part in first["loc"][:1]).replace("_", "-")
    if first["loc"][:1] == ("approval_rules",) and len(first["loc"]) > 1:
        option = f"approval rule {int(first['loc'][1]) + 1}"  # as --rules and --rule list them
    if first["loc"][:1] == ("guardrails",) and len(first["loc"]) > 1:
        option = f"guardrail {int(first['loc'][1]) + 1}"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{option}: {message} (got {shorten(repr(first.get('input')), 60)})"
