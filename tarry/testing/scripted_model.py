"""An offline, deterministic stand-in for a model provider: an OpenAI-compatible
chat-completions server that also speaks Anthropic's Messages API.

The demo and the end-to-end tests need a model that needs no network or key, answers
the same way every time and misbehaves on cue: HTTP errors, garbage bodies, slow
answers. Tests script its answers step by step and the LLM activity calls it over real
HTTP, so the whole client path (httpx, retries, timeouts, cancellation) is exercised.
A request with `"stream": true` is answered with server-sent events, as OpenAI streams:
the text and the tool calls' arguments in small pieces, and on cue with the faults real
streams have (a cut connection, a malformed event, an end without `[DONE]`).
`POST /v1/messages` answers the same script in Anthropic's dialect
(`tarry.testing.anthropic_wire`), so both providers run with no key. Besides its steps
in order, it plays whole conversations by their opening prompt (`Conversation`): that is
how `tarry dev` plays the tour, and echoes everything else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict

from tarry.config.tables import EmbeddingProfile
from tarry.contracts import ErrorCode, FunctionCall, ToolCall, Usage
from tarry.contracts.guardrails import WITHHELD_NOTE
from tarry.testing import anthropic_wire
from tarry.testing.anthropic_wire import PromptCache
from tarry.testing.script import (
    PIECE,
    Conversation,
    Script,
    ScriptedToolCall,
    ScriptStep,
    StreamFault,
    call,
    calls,
    fail,
    framed,
    pieces,
    say,
)
from tarry.testing.scripted_embeddings import embeddings_handler
from tarry.testing.scripted_moderation import moderation_handler

__all__ = [
    "ECHO_PREFIX",
    "Conversation",
    "RecordedRequest",
    "Script",
    "ScriptStep",
    "ScriptedModel",
    "ScriptedToolCall",
    "StreamFault",
    "call",
    "calls",
    "fail",
    "say",
]

CREATED = 1_700_000_000
"""The fixed `created` timestamp of every answer, so answers are reproducible."""
MAX_REQUEST_BYTES = 256 * 1024 * 1024
"""The largest request body the scripted model reads: like a provider's, far past 1 MiB."""
WRITE_BYTES = 64 * 1024
"""About how much of a stream sent without pauses goes out in one write."""


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: CIMultiDict[str]
    """Case-insensitive: `headers["authorization"]` and `headers["Authorization"]` both work."""
    step: int
    """The index of the step (of `steps`, in order) that answered it; -1 if none did
    (a conversation's step, an `if_rejected` answer, script exhausted, bad request)."""
    cancelled: bool = False
    """The client went away before the answer was sent."""
    answered: bool = False
    arrived: float = field(default_factory=time.monotonic)
    """`time.monotonic()` when its body had been read: the benchmarks time a reply to it."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the request was answered or cancelled."""

    def settle(self, *, cancelled: bool = False) -> None:
        self.cancelled = cancelled
        self.answered = not cancelled
        self.settled.set()


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    kind = (
        "rate_limit_error" if status == 429
        else "authentication_error" if status in (401, 403)
        else "server_error" if status >= 500
        else "invalid_request_error"
    )  # fmt: skip
    body = {"error": {"message": message, "type": kind}}
    return web.json_response(body, status=status, headers=headers)


def _completion(n: int, step: ScriptStep, request: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI non-streaming answer for request number `n`."""
    message: dict[str, Any] = {"role": "assistant", "content": step.content}
    if step.tool_calls:
        message["tool_calls"] = [
            ToolCall(
                id=tc.id or f"call_{n}_{i}",
                function=FunctionCall(
                    name=tc.name,
                    arguments=tc.arguments
                    if isinstance(tc.arguments, str)
                    else json.dumps(tc.arguments),
                ),
            ).model_dump()
            for i, tc in enumerate(step.tool_calls)
        ]
    prompt = 10 * len(request["messages"])
    usage = step.usage or Usage(prompt_tokens=prompt, completion_tokens=5, total_tokens=prompt + 5)
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": CREATED,
        "model": request.get("model", "scripted"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": step.finish_reason
                or ("tool_calls" if step.tool_calls else "stop"),
            }
        ],
        "usage": usage.model_dump(),
    }


def _stream_events(
    completion: dict[str, Any], include_usage: bool, size: int, limit: int | None
) -> Iterator[str]:
    """The `data:` frames OpenAI streams for `completion`: a role delta, the text and
    each call's arguments in `size`-character pieces (at most `limit` of them), the
    finish reason, the usage if asked for, then `[DONE]`. Made as they are sent: a long
    answer's events all at once would hold the server's loop for seconds."""
    for event in _stream_chunks(completion, include_usage, size, limit):
        yield f"data: {event}\n\n"
    yield "data: [DONE]\n\n"


def _stream_chunks(
    completion: dict[str, Any], include_usage: bool, size: int, limit: int | None
) -> Iterator[str]:
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return json.dumps(head | {"choices": choices})

    content = message["content"]
    yield chunk({"role": "assistant", "content": "" if content is not None else None})
    yield from framed(chunk({"content": PIECE}), pieces(content or "", size, limit))
    for i, tool_call in enumerate(message.get("tool_calls") or []):
        function = tool_call["function"]
        start = {"index": i, "id": tool_call["id"], "type": "function"}
        start["function"] = {"name": function["name"], "arguments": ""}
        yield chunk({"tool_calls": [start]})
        fragment = chunk({"tool_calls": [{"index": i, "function": {"arguments": PIECE}}]})
        yield from framed(fragment, pieces(function["arguments"], size, limit))
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield json.dumps(head | {"choices": [], "usage": completion["usage"]})


async def _stream(
    request: web.Request, step: ScriptStep, events: Iterable[str]
) -> web.StreamResponse:
    """Sends the server-sent `events`, pausing between them and faulting on cue. With no
    pause, events go out in writes of about `WRITE_BYTES`, as a provider's packets carry
    several: a write per event makes a stream of a million events slow to send."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **step.headers})
    await response.prepare(request)
    batch: list[bytes] = []
    size = 0

    async def send() -> None:
        nonlocal size
        if batch:
            await response.write(b"".join(batch))
        batch.clear()
        size = 0

    for i, event in enumerate(events):
        if step.stream_fault is not None and i == step.fault_after:
            await send()
            if step.stream_fault == "cut":
                # Mid chunked body: the client reads an incomplete message, not an end.
                assert request.transport is not None
                request.transport.close()
                return response
            if step.stream_fault == "malformed":
                await response.write(b'data: {"choices": [{"delta": \n\n')
            if step.stream_fault == "stall":
                await asyncio.sleep(3600)
            await response.write_eof()
            return response
        if i and step.chunk_delay:
            await asyncio.sleep(step.chunk_delay)
        batch.append(data := event.encode())
        size += len(data)
        if size >= WRITE_BYTES or step.chunk_delay:
            await send()
            await asyncio.sleep(0)  # the client may share this loop: let it read
    await send()
    await response.write_eof()
    return response


ECHO_PREFIX = "(offline scripted model) You said: "


def _echo(request: dict[str, Any]) -> ScriptStep:
    """The answer past the end of the script: the last user message, said back."""
    said = next(reversed(_user_texts(request)), None)
    return say(ECHO_PREFIX + (said if said is not None else "(nothing)"))


def _user_texts(request: dict[str, Any]) -> list[str | None]:
    """The text of each user message of the request, in order; None for one without
    text (an Anthropic user message holding only tool results)."""
    texts: list[str | None] = []
    for m in request["messages"]:
        if isinstance(m, dict) and m.get("role") == "user":
            said = m.get("content")
            if isinstance(said, list):  # Anthropic's content blocks
                said = "".join(b.get("text", "") for b in said if isinstance(b, dict)) or None
            texts.append(said if isinstance(said, str) else None)
    return texts


REFUSALS = frozenset({ErrorCode.TOOL_REJECTED, ErrorCode.TOOL_APPROVAL_EXPIRED})
"""The error codes of a gated call that did not run: `ScriptStep.if_rejected` answers them."""


def _tool_results(request: dict[str, Any]) -> Iterator[str]:
    """The texts of the tool results that follow the request's last assistant message:
    OpenAI's `tool` messages, or the `tool_result` blocks of Anthropic's user message."""
    messages = [m for m in request["messages"] if isinstance(m, dict)]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    for message in messages[last + 1 :]:
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    yield str(block.get("content", ""))


def _refused(request: dict[str, Any]) -> bool:
    """Whether one of the calls the last answer asked for did not run (`REFUSALS`)."""
    for text in _tool_results(request):
        try:
            result = json.loads(text)
        except ValueError:
            continue
        error = result.get("error") if isinstance(result, dict) else None
        if isinstance(error, dict) and error.get("code") in REFUSALS:
            return True
    return False


def _withheld(request: dict[str, Any]) -> int:
    """How many answers in a row an output guardrail withheld: the run's notes that say
    so (`WITHHELD_NOTE`) since the request's last assistant message."""
    messages = [m for m in request["messages"] if isinstance(m, dict)]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return sum(
        1
        for m in messages[last + 1 :]
        if isinstance(text := m.get("content"), str) and text.startswith(WITHHELD_NOTE)
    )


def _answer_after(
    previous: ScriptStep | None, step: ScriptStep | None, request: dict[str, Any]
) -> ScriptStep | None:
    """`step`, or `previous.if_rejected` when the request tells that a call `previous`
    asked for did not run; in place of an answer withheld, its `if_withheld`."""
    if previous is not None and previous.if_rejected is not None and _refused(request):
        step = previous.if_rejected
    for _ in range(_withheld(request)):
        if step is None or step.if_withheld is None:
            break
        step = step.if_withheld
    return step


def _conversation_step(
    conversations: Iterable[Conversation], request: dict[str, Any]
) -> ScriptStep | None:
    """The step of the conversation the request belongs to, for where it stands (its
    last step's `if_rejected` if a call of it was refused); None when it belongs to none
    or is past its conversation's steps."""
    opening = next(iter(_user_texts(request)), None)
    if opening is None:
        return None
    messages = request["messages"]
    answered = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    for conversation in conversations:
        if conversation.answers(opening):
            steps = conversation.steps
            previous = steps[answered - 1] if 0 < answered <= len(steps) else None
            step = steps[answered] if answered < len(steps) else None
            return _answer_after(previous, step, request)
    return None


@dataclass(frozen=True)
class _Dialect:
    """How one provider's API renders a step: its answer, that answer's stream (as
    server-sent event frames) and its errors."""

    answer: Callable[[int, ScriptStep, dict[str, Any]], dict[str, Any]]
    """(request number, step, request body) -> the plain answer."""
    events: Callable[[dict[str, Any], dict[str, Any], ScriptStep], Iterable[str]]
    """(answer, request body, step) -> the stream's frames."""
    error: Callable[[int, str, dict[str, str] | None], web.Response]


_OPENAI = _Dialect(
    answer=_completion,
    events=lambda answer, body, step: _stream_events(
        answer,
        bool((body.get("stream_options") or {}).get("include_usage")),
        step.chunk_chars,
        step.max_pieces,
    ),
    error=_error,
)


class ScriptedModel:
    """A model server on 127.0.0.1 that answers from a FIFO of script steps, in OpenAI's
    dialect (`/v1/chat/completions`) or Anthropic's (`/v1/messages`)."""

    def __init__(
        self,
        steps: Iterable[ScriptStep] = (),
        *,
        conversations: Iterable[Conversation] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        when_exhausted: Literal["error", "echo"] = "error",
    ) -> None:
        """`steps` answer in order, after `conversations` (see `Script`).
        `when_exhausted="echo"` answers every request past the script with a short
        deterministic text instead of HTTP 400, for people chatting with `tarry dev`;
        tests keep the default, so an unplanned extra call fails loudly."""
        self.requests: list[RecordedRequest] = []
        self._steps: deque[ScriptStep] = deque(steps)
        self._conversations = list(conversations)
        self._when_exhausted = when_exhausted
        self._used = 0
        self._last: ScriptStep | None = None
        """The step of `steps` that answered last: its `if_rejected` may answer next."""
        self._host, self._port = host, port
        self._arrival = asyncio.Event()
        self.prompt_cache = PromptCache()
        """What the Anthropic endpoint's requests marked for caching."""
        self._anthropic = _Dialect(
            answer=lambda n, step, body: anthropic_wire.message(n, step, body, self.prompt_cache),
            events=lambda answer, body, step: anthropic_wire.stream_events(
                answer, step.chunk_chars, step.max_pieces
            ),
            error=anthropic_wire.error,
        )
        # aiohttp refuses bodies over 1 MiB by default; a provider takes far more, and a
        # run whose transcript holds a large tool result sends it with every call.
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/moderations", moderation_handler())
        app.router.add_post("/v1/embeddings", embeddings_handler())
        # handler_cancellation: a client that hangs up cancels its handler, so a
        # cancelled activity shows up as a cancelled request. A short shutdown
        # timeout keeps close() from waiting out long delays.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)

    @classmethod
    def of(cls, script: Script, **options: Any) -> ScriptedModel:
        """The model that plays `script` (a script file's); `options` as for the class."""
        return cls(script.steps, conversations=script.conversations, **options)

    def add(self, *steps: ScriptStep) -> None:
        """Append steps to the script, also while a run is in flight."""
        self._steps.extend(steps)

    def add_conversation(self, prompt: str, *steps: ScriptStep) -> None:
        """Play the conversation that opens with `prompt` (`Conversation`): its answers
        go by where it stands, so several runs on one model (a run and its sub-agents)
        each get their own, and a call the worker retries gets the same answer again."""
        self._conversations.append(Conversation(prompt=prompt, steps=list(steps)))

    @property
    def remaining(self) -> int:
        return len(self._steps)

    @property
    def base_url(self) -> str:
        if not self._runner.addresses:
            raise RuntimeError("scripted model is not started")
        return f"{self.root_url}/v1"

    @property
    def embeddings(self) -> EmbeddingProfile:
        """An embedding profile of this model's deterministic embeddings (`tarry dev`'s)."""
        return EmbeddingProfile(base_url=self.base_url, model="scripted")

    @property
    def root_url(self) -> str:
        """The server's root: the base URL of an Anthropic profile, which (like the
        Anthropic SDK's `ANTHROPIC_BASE_URL`) leaves out `/v1`."""
        if not self._runner.addresses:
            raise RuntimeError("scripted model is not started")
        return f"http://{self._host}:{self._runner.addresses[0][1]}"

    async def start(self) -> None:
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def close(self) -> None:
        await self._runner.cleanup()

    async def __aenter__(self) -> ScriptedModel:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # A `timeout` argument reads better in tests than wrapping every call in asyncio.timeout.
    async def wait_for_requests(self, n: int, timeout: float = 10.0) -> RecordedRequest:  # noqa: ASYNC109
        """Wait until at least `n` requests arrived and return the `n`-th (1-based)."""
        try:
            async with asyncio.timeout(timeout):
                while len(self.requests) < n:
                    await self._arrival.wait()
        except TimeoutError:
            raise TimeoutError(
                f"scripted model: {len(self.requests)} requests arrived, "
                f"expected at least {n} within {timeout}s"
            ) from None
        return self.requests[n - 1]

    def _record(self, body: dict[str, Any], request: web.Request, step: int) -> RecordedRequest:
        recorded = RecordedRequest(body=body, headers=CIMultiDict(request.headers), step=step)
        self.requests.append(recorded)
        # Wake every waiter, and give later waiters a fresh event to wait on.
        self._arrival.set()
        self._arrival = asyncio.Event()
        return recorded

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, _OPENAI)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, self._anthropic)

    async def _serve(self, request: web.Request, dialect: _Dialect) -> web.StreamResponse:
        """Answers a request with the script's next step, in `dialect`."""
        try:
            body = json.loads(await request.read())
        except ValueError:
            return dialect.error(400, "scripted model: the request body is not JSON", None)
        if not isinstance(body, dict):
            return dialect.error(400, "scripted model: the request body is not a JSON object", None)
        if not isinstance(body.get("messages"), list):
            self._record(body, request, -1).settle()
            return dialect.error(400, "scripted model: the request has no `messages` list", None)
        if (step := _conversation_step(self._conversations, body)) is not None:
            return await self._answer(request, dialect, body, step, -1)
        if (step := _answer_after(self._last, None, body)) is not None:
            self._last = step
            return await self._answer(request, dialect, body, step, -1)
        if not self._steps:
            self._record(body, request, -1).settle()
            if self._when_exhausted == "echo":
                echo = _echo(body)
                answer = dialect.answer(len(self.requests), echo, body)
                if body.get("stream"):
                    return await _stream(request, echo, dialect.events(answer, body, echo))
                return web.json_response(answer)
            return dialect.error(
                400, f"scripted model: script exhausted after {self._used} requests", None
            )
        step = self._last = self._steps.popleft()
        self._used += 1
        return await self._answer(request, dialect, body, step, self._used - 1)

    async def _answer(
        self,
        request: web.Request,
        dialect: _Dialect,
        body: dict[str, Any],
        step: ScriptStep,
        index: int,
    ) -> web.StreamResponse:
        """Answers the request with `step`, recorded as answered by step `index`."""
        recorded = self._record(body, request, index)
        n = len(self.requests)
        try:
            await asyncio.sleep(step.delay)
            if body.get("stream") and step.status == 200 and step.body is None and not step.plain:
                answer = dialect.answer(n, step, body)
                streamed = await _stream(request, step, dialect.events(answer, body, step))
                recorded.settle()
                return streamed
        except asyncio.CancelledError:
            recorded.settle(cancelled=True)
            raise
        recorded.settle()
        if step.body is not None:
            return web.Response(text=step.body, status=step.status, headers=step.headers)
        if step.status != 200:
            message = step.content or f"scripted error {step.status}"
            return dialect.error(step.status, message, step.headers)
        return web.json_response(dialect.answer(n, step, body), headers=step.headers)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "scripted", "object": "model"}]}
        )


async def serve(model: ScriptedModel) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with model:
        print(f"scripted model listening on {model.base_url}", flush=True)
        await stop.wait()


def main() -> None:
    """`tarry-scripted-model`: serve a JSON script file (`Script`) until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description="Serve a scripted chat-completions model.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--script", type=Path, help="a JSON script file (see Script)")
    args = parser.parse_args()
    script = Script.from_json(args.script.read_text()) if args.script else Script()
    asyncio.run(serve(ScriptedModel.of(script, host=args.host, port=args.port)))


if __name__ == "__main__":
    main()
