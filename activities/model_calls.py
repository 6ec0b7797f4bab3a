"""The `call_llm` activity: one call to the model a run's profile names, over httpx.

The activity resolves the turn's stored conversation, its tools and its sampling into a
provider-neutral `ModelCall` and hands it to the profile's provider adapter
(`activities/openai_chat.py`, `activities/anthropic_messages.py`). Every failure leaves
as an `ApplicationError` whose `type` is an `ErrorCode` (see `activities/provider.py`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import anthropic_messages, metrics, openai_chat, traces
from activities.circuits import Circuits, provider_down
from activities.context import ContextStore, fit_to_budget
from activities.provider import ModelCall, error
from activities.response_cache import ResponseCache
from activities.sendable import sendable
from activities.tool_calls import ToolHost
from tarry.config.settings import ModelProfile
from tarry.config.tables import Provider
from tarry.contracts import (
    LLM_ACTIVITY,
    CatalogueRequest,
    ChatMessage,
    ErrorCode,
    LlmRequest,
    LlmResponse,
    PinnedMessage,
    estimate_tokens,
)

_ADAPTERS: dict[Provider, Callable[[httpx.AsyncClient, ModelCall], Awaitable[LlmResponse]]] = {
    "openai": openai_chat.answer,
    "anthropic": anthropic_messages.answer,
}


async def answer_of(http: httpx.AsyncClient, call: ModelCall) -> LlmResponse:
    """`call`'s answer, from its profile's provider, in its dialect."""
    return await _ADAPTERS[call.profile.provider](http, call)


class ModelClient:
    """Holds the worker's model profiles, the stored conversations, the profiles'
    circuits (`activities.circuits`), the response cache and one pooled HTTP client for
    all calls."""

    def __init__(
        self,
        profiles: Mapping[str, ModelProfile],
        tools: ToolHost,
        contexts: ContextStore,
        http: httpx.AsyncClient | None = None,
        responses: ResponseCache | None = None,
    ) -> None:
        self._profiles = dict(profiles)
        self._tools = tools
        self._contexts = contexts
        self._http = http or httpx.AsyncClient()
        self._circuits = Circuits()
        self._responses = responses

    async def aclose(self) -> None:
        await self._http.aclose()

    @activity.defn(name=LLM_ACTIVITY)
    async def call_llm(self, request: LlmRequest) -> LlmResponse:
        started = time.monotonic()
        try:
            answer = await self._answer(request)
        except BaseException as e:
            metrics.model_failed(request.profile, request.fallback_of, e)
            raise
        elapsed = timedelta(seconds=time.monotonic() - started)
        metrics.model_answered(request.profile, request.fallback_of, answer, elapsed)
        return answer

    async def _answer(self, request: LlmRequest) -> LlmResponse:
        profile = self._profiles.get(request.profile)
        if profile is None:
            unknown = error(
                ErrorCode.LLM_UNKNOWN_PROFILE,
                f"no model profile {request.profile!r} on this worker; "
                f"configured: {', '.join(sorted(self._profiles))}",
                retryable=False,
            )
            if request.fallback_of is not None:  # passed over, as a fallback that is down
                raise provider_down(request.profile, [], unknown)
            raise unknown
        # Only a call with somewhere to fall back to is refused while its provider is down.
        guarded = request.circuit and bool(profile.fallback or request.fallback_of)
        if guarded and self._circuits.is_open(request.profile):
            raise provider_down(request.profile, profile.fallback)
        if request.hold_words:  # not streamed: observers see no word an output check blocks
            profile = profile.model_copy(update={"stream": False})
        context, conversation = await self._contexts.extend(
            request.context, request.messages, request.tool_definitions
        )
        tools = conversation.tools
        # A run from before the catalogue (`LlmResponse.offered_tools`): a shim that goes on
        # the date the compatibility ledger gives `pre-catalogue-model-call`.
        if tools is None:
            tools = self._tools.catalogue(
                CatalogueRequest(tools=request.tools, require_approval=request.require_approval)
            )
        system = [ChatMessage(role="system", content=request.system)] if request.system else []
        pinned = [p.message for p in request.pins]
        budget = profile.context_budget - sum(estimate_tokens(m) for m in [*system, *pinned])
        window = fit_to_budget(conversation.messages, budget)
        # What the model wrote, made valid for the provider: a bad call of its own
        # must not make every later request fail (`activities/sendable.py`).
        sent = sendable([*_left_out(request.pins, conversation.count - len(window)), *window])
        call = ModelCall(
            name=request.profile,
            profile=profile,
            system=request.system,
            messages=sent,
            tools=tools,
            sampling=profile.overridden_by(request.sampling),
            turn=request.turn,
            stable=max(0, len(sent) - len(request.messages)),
            output_schema=request.output_schema,
        )
        try:
            answer = await self._ask(call, request)
        except ApplicationError as e:
            if guarded and self._circuits.failed(request.profile, profile, e):
                raise provider_down(request.profile, profile.fallback, e) from None
            raise
        if not answer.cached:  # a cached answer says nothing of the provider
            self._circuits.answered(request.profile)
        if request.fallback_of is not None:
            answer.message.profile = request.profile
        if conversation.tools is None:
            answer.offered_tools = [t.name for t in tools]
            answer.gated_tools = {t.name: t.parameters for t in tools if t.needs_approval}
            answer.non_idempotent_tools = [t.name for t in tools if not t.idempotent]
        answer.context = context
        answer.sent_messages = len(window)  # the pins before it are not the window
        return answer

    async def _ask(self, call: ModelCall, request: LlmRequest) -> LlmResponse:
        """The provider's answer to `call`, or the response cache's where the profile
        keeps one and the run is not private."""
        profile, name = call.profile, call.name
        cache = self._responses if profile.cache and not request.private else None
        with traces.chat(
            profile, request.turn, call.messages, request.system, request.fallback_of
        ) as span:
            answer = await cache.get(name, call) if cache else None
            if answer is None:
                answer = await answer_of(self._http, call)
                if profile.prices is not None:
                    answer.usage.cost_usd = profile.prices.cost_of(answer.usage)
                if cache:
                    await cache.put(name, call, answer)
            traces.answered(span, profile, answer)
        return answer


def _left_out(pins: list[PinnedMessage], window_start: int) -> list[ChatMessage]:
    """The pinned messages before the window (its first message is the stored
    conversation's `window_start`), in transcript order: those in it are sent there."""
    return [p.message for p in sorted(pins, key=lambda p: p.index) if p.index < window_start]
