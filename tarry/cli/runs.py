"""The "Runs" commands: start a run, talk to it, set what a reply does while it works,
pin its messages in the model's window, pause, stop and resume it."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from tarry.cli.chat import converse
from tarry.cli.common import (
    AsJson,
    Message,
    Panel,
    RunId,
    check_id,
    console,
    emit,
    output,
    read,
    stop_point,
    with_run,
    with_tarry,
)
from tarry.cli.follow import exchange
from tarry.cli.run_options import (
    DEFAULT_MAX_TURNS,
    AgentsOption,
    ApprovalDefaultOption,
    ApprovalTimeoutOption,
    ApproverOption,
    GuardrailOption,
    GuardrailsOption,
    MaxCostOption,
    MaxTokensOption,
    MaxTurnsOption,
    MemoryOption,
    MemoryScopeOption,
    ModelOption,
    ModeOption,
    Prompt,
    ReplyPolicyOption,
    RequireApprovalOption,
    RuleOption,
    RulesOption,
    SystemOption,
    ToolChoiceOption,
    ToolsOption,
    run_input,
)
from tarry.contracts import ApprovalDefault, Mode, Phase, ReplyPolicy, RunState, Timeouts
from tarry.contracts.memories import MemoryAccess

if TYPE_CHECKING:
    from tarry.client import RunHandle, Tarry

commands = typer.Typer()

RemotePollOption = Annotated[
    float | None,
    typer.Option(
        "--remote-poll",
        min=0.1,
        help="Seconds between asks of a remote A2A agent's task how it stands, for a remote"
        " that pushes no news (300 by default).",
    ),
]


@commands.command(rich_help_panel=Panel.RUNS)
def start(
    prompt: Prompt = "",
    model: ModelOption = "default",
    system: SystemOption = None,
    tools: ToolsOption = None,
    agents: AgentsOption = None,
    mode: ModeOption = Mode.CHAT,
    require_approval: RequireApprovalOption = None,
    approver: ApproverOption = None,
    rule: RuleOption = None,
    rules: RulesOption = None,
    guardrail: GuardrailOption = None,
    guardrails: GuardrailsOption = None,
    memory: MemoryOption = MemoryAccess.OFF,
    memory_scope: MemoryScopeOption = None,
    approval_timeout: ApprovalTimeoutOption = None,
    approval_default: ApprovalDefaultOption = ApprovalDefault.REJECT,
    max_turns: MaxTurnsOption = DEFAULT_MAX_TURNS,
    max_tokens: MaxTokensOption = None,
    max_cost: MaxCostOption = None,
    run_id: Annotated[
        str | None, typer.Option("--id", help="The run id; a fresh one by default.")
    ] = None,
    tool_choice: ToolChoiceOption = None,
    on_reply_while_running: ReplyPolicyOption = ReplyPolicy.QUEUE,
    remote_poll: RemotePollOption = None,
    as_json: AsJson = False,
) -> None:
    """Start a run and print its id; the run goes on without this command."""
    input = run_input(
        prompt,
        model=model,
        system=system,
        tools=tools,
        agents=agents,
        mode=mode,
        require_approval=require_approval,
        approver=approver,
        approval_timeout=approval_timeout,
        approval_default=approval_default,
        max_turns=max_turns,
        max_tokens=max_tokens,
        max_cost=max_cost,
        tool_choice=tool_choice,
        on_reply_while_running=on_reply_while_running,
        rule=rule,
        rules=rules,
        guardrail=guardrail,
        guardrails=guardrails,
        memory=memory,
        memory_scope=memory_scope,
    )
    if remote_poll is not None:
        polled = Timeouts(remote_poll=timedelta(seconds=remote_poll))
        input = input.model_copy(update={"timeouts": polled})
    check_id(run_id)

    async def begin(tarry: Tarry) -> str:
        return (await tarry.start(input, run_id=run_id)).id

    started = with_tarry(begin)
    output({"run_id": started}, as_json, Text(started))


@commands.command(rich_help_panel=Panel.RUNS)
def reply(run_id: RunId, text: Message) -> None:
    """Queue a reply; the run reads it at its next turn boundary. Does not wait."""
    message = read(text)
    with_run(run_id, lambda run: run.reply(message))


@commands.command(rich_help_panel=Panel.RUNS)
def send(run_id: RunId, text: Message, as_json: AsJson = False) -> None:
    """Send a reply and wait for the agent's answer, showing its tool calls as they happen.

    Ctrl-C meanwhile pauses the run at its next turn boundary (a reply it has already
    received still gets its answer first). With --json, prints the run's state at the
    answer instead.
    """
    message = read(text)
    if as_json:
        stop_point(with_run(run_id, lambda run: run.send(message)), run_id, as_json=True)
        return
    stop_point(with_run(run_id, lambda run: exchange(run, message, console)), run_id)


@commands.command("chat", rich_help_panel=Panel.RUNS)
def chat_command(
    run_id: Annotated[
        str | None, typer.Argument(metavar="RUN", help="A run to pick up; a new one if none.")
    ] = None,
) -> None:
    """Talk with a run in the terminal: a new one, or RUN where it was left.

    Tool calls waiting for approval are shown one by one to approve, reject or edit.
    Leaving the chat (/quit, Ctrl-D) leaves the run waiting for the next message.
    """
    check_id(run_id)
    with_tarry(lambda tarry: converse(tarry, run_id, console))


@commands.command(rich_help_panel=Panel.RUNS)
def pause(run_id: RunId) -> None:
    """Ask the run to stop at its next turn boundary and wait for a reply."""
    with_run(run_id, lambda run: run.pause())


@commands.command("reply-policy", rich_help_panel=Panel.RUNS)
def reply_policy(
    run_id: RunId,
    policy: Annotated[
        ReplyPolicy,
        typer.Argument(
            metavar="queue|interrupt|reject",
            help="What a reply does while the agent works from now on: waits its turn, cuts"
            " the model call short, or is refused.",
        ),
    ],
    as_json: AsJson = False,
) -> None:
    """Change what a reply does that arrives while the run works (a waiting run takes
    every reply at once), as `--on-reply-while-running` set it at the start."""
    state = with_run(run_id, lambda run: run.set_reply_policy(policy))
    said = f"a reply to run {run_id} while it works now: {state.on_reply_while_running}"
    output(state, as_json, Text(said))


MessageIndex = Annotated[
    int,
    typer.Argument(
        metavar="MESSAGE", min=0, help="The message's index, from 0, as `tarry show` counts."
    ),
]


@commands.command(rich_help_panel=Panel.RUNS)
def pin(run_id: RunId, index: MessageIndex, as_json: AsJson = False) -> None:
    """Keep a message in the model's window from the next call on, however long the run
    goes on; the pinned messages count against the context budget."""
    state = with_run(run_id, lambda run: run.pin(index))
    output(state, as_json, Text(f"run {run_id}'s pinned messages: {_listed(state.pinned)}"))


@commands.command(rich_help_panel=Panel.RUNS)
def unpin(run_id: RunId, index: MessageIndex, as_json: AsJson = False) -> None:
    """Let a pinned message leave the model's window as the others do."""
    state = with_run(run_id, lambda run: run.unpin(index))
    output(state, as_json, Text(f"run {run_id}'s pinned messages: {_listed(state.pinned)}"))


def _listed(indexes: list[int]) -> str:
    return ", ".join(map(str, indexes)) or "none"


@commands.command(rich_help_panel=Panel.RUNS)
def stop(
    run_id: RunId,
    reason: Annotated[
        str | None, typer.Option(help="Why; `status`, `show` and the result keep it.")
    ] = None,
) -> None:
    """End the run: a waiting run completes, a working one is aborted at once.
    `tarry resume` goes on with it later."""
    with_run(run_id, lambda run: run.stop(reason))
    console.print(Text(f"stopped run {run_id}"), soft_wrap=True)


@commands.command(rich_help_panel=Panel.RUNS)
def fork(
    run_id: RunId,
    at: Annotated[
        int,
        typer.Option(
            min=0,
            metavar="N",
            help="The user message to branch at, by its number in `tarry show --numbers`.",
        ),
    ],
    text: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT", help="Its new text (`-` reads stdin); as it was if not given."
        ),
    ] = None,
    fork_id: Annotated[
        str | None,
        typer.Option("--id", help="The fork's run id; `RUN-fork-<short uuid>` by default."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Start a new run from RUN's conversation before user message N, with that message
    again or TEXT in its place, and print its id. RUN itself is untouched and goes on."""
    check_id(fork_id)
    new_text = None if text is None else read(text)

    async def branch(run: RunHandle) -> str:
        return (await run.fork(at, new_text, run_id=fork_id)).id

    forked = with_run(run_id, branch)
    output({"run_id": forked}, as_json, Text(forked))


@commands.command(rich_help_panel=Panel.RUNS)
def resume(run_id: RunId, as_json: AsJson = False) -> None:
    """Go on with an ended run: one that failed (a model error once its retries were
    spent, a profile to fix) or was stopped. A new run under the same id takes its whole
    conversation and waits for your reply; the error that ended it stays shown until then.
    """

    async def go_on(run: RunHandle) -> RunState:
        return await (await run.resume()).wait_for({Phase.WAITING_USER, Phase.RUNNING})

    state = with_run(run_id, go_on)
    if as_json:
        emit(state)
    else:
        console.print(f"run {run_id} goes on: it waits for your reply (`tarry send {run_id} ...`)")
        if state.error:
            console.print(f"it ended with {state.error.code}: {state.error.message}")
