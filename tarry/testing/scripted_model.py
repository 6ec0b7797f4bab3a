"""An offline, deterministic stand-in for an OpenAI-compatible chat-completions server.

The demo and the end-to-end tests need a model that needs no network or key, answers
the same way every time and misbehaves on cue: HTTP errors, garbage bodies, slow
answers. Tests script its answers step by step and the LLM activity calls it over real
HTTP, so the whole client path (httpx, retries, timeouts, cancellation) is exercised.
A request with `"stream": true` is answered with server-sent events, as OpenAI streams:
the text and the tool calls' arguments in small pieces, and on cue with the faults real
streams have (a cut connection, a malformed event, an end without `[DONE]`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict
from pydantic import BaseModel, Field, TypeAdapter

from tarry.contracts import FunctionCall, ToolCall, Usage

CREATED = 1_700_000_000
"""The fixed `created` timestamp of every answer, so answers are reproducible."""
MAX_STREAM_PIECES = 2000
"""The most events one streamed text (or one call's arguments) is cut into: a real model
sends a token or so per event, but never writes a megabyte in one answer, which the
offline model does when it echoes one. At 4 characters an event, a 3 MB echo would be
750,000 events, slower to parse than any attempt's timeout."""
MAX_REQUEST_BYTES = 256 * 1024 * 1024
"""The largest request body the scripted model reads: like a provider's, far past 1 MiB."""


StreamFault = Literal["cut", "malformed", "no_end", "stall"]
"""`cut` drops the connection mid-body; `malformed` sends an event that is not JSON;
`no_end` ends the body cleanly with neither a `finish_reason` nor `[DONE]`; `stall`
sends nothing more, holding the connection open."""


class ScriptedToolCall(BaseModel):
    name: str
    arguments: dict[str, Any] | str = {}
    """A dict is sent as its JSON text; a str is sent verbatim (it need not be JSON)."""
    id: str | None = None
    """None lets the server name it `call_<n>_<index>`, n being the 1-based request number."""


class ScriptStep(BaseModel):
    """One scripted answer; each request to the model consumes the next step."""

    content: str | None = None
    """The assistant text; for an error step (`status` != 200), the error message."""
    tool_calls: list[ScriptedToolCall] | None = None
    finish_reason: str | None = None
    """None means "tool_calls" when there are tool calls, else "stop"."""
    usage: Usage | None = None
    """None means 10 prompt tokens per request message and 5 completion tokens."""
    status: int = 200
    headers: dict[str, str] = {}
    body: str | None = None
    """Sent verbatim instead of the JSON answer, e.g. to send garbage."""
    delay: float = 0.0
    """Seconds to wait before answering; the client may give up first."""
    chunk_chars: int = Field(default=4, ge=1)
    """Streamed answers: characters of text, or of a call's arguments, per event; more
    for a text longer than `MAX_STREAM_PIECES` of them (see there)."""
    chunk_delay: float = 0.0
    """Streamed answers: seconds between events, so observers see words before the end."""
    stream_fault: StreamFault | None = None
    """Streamed answers: how the stream goes wrong after `fault_after` events."""
    fault_after: int = 2
    plain: bool = False
    """Answer a streaming request with the plain JSON body, as some servers do."""


def say(content: str, **kw: Any) -> ScriptStep:
    """A text answer."""
    return ScriptStep(content=content, **kw)


def call(
    name: str,
    arguments: dict[str, Any] | str | None = None,
    *,
    id: str | None = None,
    **kw: Any,
) -> ScriptStep:
    """An answer with one tool call; `kw` sets other step fields, e.g. `delay`."""
    tool_call = ScriptedToolCall(name=name, arguments={} if arguments is None else arguments, id=id)
    return calls(tool_call, **kw)


def calls(*tool_calls: ScriptedToolCall, **kw: Any) -> ScriptStep:
    """An answer with several tool calls; `kw` sets other step fields, e.g. `delay`."""
    return ScriptStep(tool_calls=list(tool_calls), **kw)


def fail(status: int, **kw: Any) -> ScriptStep:
    """An HTTP error answer with an OpenAI-style error body."""
    return ScriptStep(status=status, **kw)


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: CIMultiDict[str]
    """Case-insensitive: `headers["authorization"]` and `headers["Authorization"]` both work."""
    step: int
    """The index of the step that answered it; -1 if none did (script exhausted, bad request)."""
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


def _stream_events(completion: dict[str, Any], include_usage: bool, size: int) -> list[str]:
    """The `data:` payloads OpenAI streams for `completion`: a role delta, the text and
    each call's arguments in `size`-character pieces (at most `MAX_STREAM_PIECES` of
    them), the finish reason, the usage if asked for, then `[DONE]`."""
    head = {k: completion[k] for k in ("id", "created", "model")}
    head["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        return json.dumps(head | {"choices": choices})

    def pieces(text: str) -> list[str]:
        step = max(size, -(-len(text) // MAX_STREAM_PIECES))
        return [text[i : i + step] for i in range(0, len(text), step)]

    content = message["content"]
    events = [chunk({"role": "assistant", "content": "" if content is not None else None})]
    events += [chunk({"content": piece}) for piece in pieces(content or "")]
    for i, tool_call in enumerate(message.get("tool_calls") or []):
        function = tool_call["function"]
        start = {"index": i, "id": tool_call["id"], "type": "function"}
        start["function"] = {"name": function["name"], "arguments": ""}
        events.append(chunk({"tool_calls": [start]}))
        events += [
            chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            for piece in pieces(function["arguments"])
        ]
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append(json.dumps(head | {"choices": [], "usage": completion["usage"]}))
    return [*events, "[DONE]"]


async def _stream(
    request: web.Request, step: ScriptStep, completion: dict[str, Any]
) -> web.StreamResponse:
    """Sends `completion` as server-sent events, pausing between them and faulting on cue."""
    options = (await request.json()).get("stream_options") or {}
    events = _stream_events(completion, bool(options.get("include_usage")), step.chunk_chars)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **step.headers})
    await response.prepare(request)
    for i, event in enumerate(events):
        if step.stream_fault is not None and i == step.fault_after:
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
        if i:
            await asyncio.sleep(step.chunk_delay)
        await response.write(f"data: {event}\n\n".encode())
    await response.write_eof()
    return response


ECHO_PREFIX = "(offline scripted model) You said: "


def _echo(request: dict[str, Any]) -> ScriptStep:
    """The answer past the end of the script: the last user message, said back."""
    said = next(
        (
            m.get("content")
            for m in reversed(request["messages"])
            if isinstance(m, dict) and m.get("role") == "user"
        ),
        None,
    )
    return say(ECHO_PREFIX + (said if isinstance(said, str) else "(nothing)"))


class ScriptedModel:
    """A chat-completions server on 127.0.0.1 that answers from a FIFO of script steps."""

    def __init__(
        self,
        steps: Iterable[ScriptStep] = (),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        when_exhausted: Literal["error", "echo"] = "error",
    ) -> None:
        """`when_exhausted="echo"` answers every request past the script with a short
        deterministic text instead of HTTP 400, for people chatting with `tarry dev`;
        tests keep the default, so an unplanned extra call fails loudly."""
        self.requests: list[RecordedRequest] = []
        self._steps: deque[ScriptStep] = deque(steps)
        self._when_exhausted = when_exhausted
        self._used = 0
        self._host, self._port = host, port
        self._arrival = asyncio.Event()
        # aiohttp refuses bodies over 1 MiB by default; a provider takes far more, and a
        # run whose transcript holds a large tool result sends it with every call.
        app = web.Application(client_max_size=MAX_REQUEST_BYTES)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # handler_cancellation: a client that hangs up cancels its handler, so a
        # cancelled activity shows up as a cancelled request. A short shutdown
        # timeout keeps close() from waiting out long delays.
        self._runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)

    def add(self, *steps: ScriptStep) -> None:
        """Append steps to the script, also while a run is in flight."""
        self._steps.extend(steps)

    @property
    def remaining(self) -> int:
        return len(self._steps)

    @property
    def base_url(self) -> str:
        if not self._runner.addresses:
            raise RuntimeError("scripted model is not started")
        return f"http://{self._host}:{self._runner.addresses[0][1]}/v1"

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
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _error(400, "scripted model: the request body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "scripted model: the request body is not a JSON object")
        if not isinstance(body.get("messages"), list):
            self._record(body, request, -1).settle()
            return _error(400, "scripted model: the request has no `messages` list")
        if not self._steps:
            self._record(body, request, -1).settle()
            if self._when_exhausted == "echo":
                echo = _echo(body)
                completion = _completion(len(self.requests), echo, body)
                if body.get("stream"):
                    return await _stream(request, echo, completion)
                return web.json_response(completion)
            return _error(400, f"scripted model: script exhausted after {self._used} requests")
        step = self._steps.popleft()
        recorded = self._record(body, request, self._used)
        self._used += 1
        n = len(self.requests)
        try:
            await asyncio.sleep(step.delay)
            if body.get("stream") and step.status == 200 and step.body is None and not step.plain:
                streamed = await _stream(request, step, _completion(n, step, body))
                recorded.settle()
                return streamed
        except asyncio.CancelledError:
            recorded.settle(cancelled=True)
            raise
        recorded.settle()
        if step.body is not None:
            return web.Response(text=step.body, status=step.status, headers=step.headers)
        if step.status != 200:
            return _error(
                step.status, step.content or f"scripted error {step.status}", step.headers
            )
        return web.json_response(_completion(n, step, body), headers=step.headers)

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
    """`tarry-scripted-model`: serve a JSON script (a list of steps) until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(description="Serve a scripted chat-completions model.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--script", type=Path, help="a JSON file: a list of ScriptStep objects")
    args = parser.parse_args()
    steps = (
        TypeAdapter(list[ScriptStep]).validate_json(args.script.read_text()) if args.script else []
    )
    asyncio.run(serve(ScriptedModel(steps, host=args.host, port=args.port)))


if __name__ == "__main__":
    main()
