"""Temporal's floor: the plainest workflows that do what a Tarry run does, with no Tarry
code around them, so a figure for Tarry can be read against what Temporal itself costs.

`FloorTurnsWorkflow` calls the same two activities per turn as a Tarry run (the real
`call_llm` and a real tool), passing the same inputs. `FloorChatWorkflow` answers each
`send` update with one real `call_llm`: a chat turn with nothing else around it.
`FloorToolChatWorkflow` answers each `send` as `FloorTurnsWorkflow` answers its prompt,
keeping the conversation: the exchange `bench.peers` times. `ParkedWorkflow` waits for an
update forever and answers it at once: the cheapest run a worker can hold.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from tarry.contracts import (
        LLM_ACTIVITY,
        ChatMessage,
        LlmRequest,
        LlmResponse,
        ToolInvocation,
        ToolResult,
    )

_TIMEOUT = timedelta(seconds=30)


async def _until_answered(messages: list[ChatMessage], turn: int) -> int:
    """Asks the model and runs its tool calls until it answers without one, appending
    its answers and the tools' results to `messages`; returns the last turn's number."""
    while True:
        turn += 1
        answer: LlmResponse = await workflow.execute_activity(
            LLM_ACTIVITY,
            LlmRequest(profile="default", messages=messages, turn=turn),
            result_type=LlmResponse,
            start_to_close_timeout=_TIMEOUT,
        )
        messages.append(answer.message)
        if not answer.message.tool_calls:
            return turn
        for call in answer.message.tool_calls:
            result: ToolResult = await workflow.execute_activity(
                call.function.name,
                ToolInvocation(
                    run_id=workflow.info().workflow_id,
                    call_id=call.id,
                    arguments=call.function.arguments,
                ),
                result_type=ToolResult,
                start_to_close_timeout=_TIMEOUT,
            )
            messages.append(
                ChatMessage(role="tool", tool_call_id=call.id, content=result.to_content())
            )


@workflow.defn(name="BenchFloorTurns")
class FloorTurnsWorkflow:
    @workflow.run
    async def run(self, prompt: str) -> int:
        """Asks the model and runs its tool calls until it answers without one;
        returns the number of model calls."""
        return await _until_answered([ChatMessage(role="user", content=prompt)], 0)


@workflow.defn(name="BenchFloorToolChat")
class FloorToolChatWorkflow:
    """A chat whose every message is answered as a Tarry run answers it: the model, its
    tool calls, the model again, until it answers without one (the peers' exchange)."""

    def __init__(self) -> None:
        self._done = False
        self._messages: list[ChatMessage] = []
        self._turn = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done and workflow.all_handlers_finished())

    @workflow.update
    async def send(self, text: str) -> str:
        self._messages.append(ChatMessage(role="user", content=text))
        self._turn = await _until_answered(self._messages, self._turn)
        return self._messages[-1].content or ""

    @workflow.signal
    def finish(self) -> None:
        self._done = True


@workflow.defn(name="BenchFloorChat")
class FloorChatWorkflow:
    def __init__(self) -> None:
        self._done = False
        self._turn = 0

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done and workflow.all_handlers_finished())

    @workflow.update
    async def send(self, text: str) -> str:
        """Asks the model about `text` alone (the floor keeps no conversation) and
        answers with what it said."""
        self._turn += 1
        answer: LlmResponse = await workflow.execute_activity(
            LLM_ACTIVITY,
            LlmRequest(
                profile="default",
                messages=[ChatMessage(role="user", content=text)],
                turn=self._turn,
            ),
            result_type=LlmResponse,
            start_to_close_timeout=_TIMEOUT,
        )
        return answer.message.content or ""

    @workflow.signal
    def finish(self) -> None:
        self._done = True


@workflow.defn(name="BenchParked")
class ParkedWorkflow:
    def __init__(self) -> None:
        self._done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done)

    @workflow.update
    async def poke(self, n: int) -> int:
        return n + 1

    @workflow.signal
    def finish(self) -> None:
        self._done = True
