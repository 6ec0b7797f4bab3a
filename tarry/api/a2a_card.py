"""The A2A agent card of each agent `tarry serve` offers over A2A: plain runs (`/a2a`),
and each agent definition of the config file (`[agents.NAME]`, `/a2a/NAME`).

A card says what the agent does (its skills: the agent's own, from its description, and
one per tool it may use) and how to reach it: its JSON-RPC endpoint, and the sign-in the
API asks for (a bearer token, a JWT of the identity provider), so that an A2A client
knows before its first request which credentials to send."""

from __future__ import annotations

import importlib.metadata

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol

from tarry.api.signin import SignIn
from tarry.contracts import AgentSpec

__all__ = ["PLAIN_RUNS", "agent_card", "security_of"]

PLAIN_RUNS = "tarry"
"""The name of the card of plain runs (`/a2a`): the workers' default model and tools."""

_MODES = ["text/plain", "application/json"]
"""What a task takes and answers: words, and data (a decision; a structured output)."""

_PLAIN = (
    "Durable, human-in-the-loop agent runs: each task is a Tarry run, which survives"
    " restarts, asks its person when it needs them (input-required) and waits for their"
    " approval of gated tool calls, for as long as it takes."
)


def agent_card(url: str, name: str | None, spec: AgentSpec | None, sign_in: SignIn) -> AgentCard:
    """The card of agent `name` (None: plain runs, `spec` None) served at `url`."""
    schemes, requirements = security_of(sign_in)
    return AgentCard(
        name=name or PLAIN_RUNS,
        description=(spec.description if spec else "") or _PLAIN,
        supported_interfaces=[
            AgentInterface(
                url=url,
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            )
        ],
        version=importlib.metadata.version("tarry"),
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        security_schemes=schemes,
        security_requirements=requirements,
        default_input_modes=_MODES,
        default_output_modes=_MODES,
        skills=_skills(name, spec),
    )


def _skills(name: str | None, spec: AgentSpec | None) -> list[AgentSkill]:
    """The agent's own skill, then one per tool it names (a definition that names none
    may use every tool the workers have, which the API does not know)."""
    own = AgentSkill(
        id=name or PLAIN_RUNS,
        name=name or PLAIN_RUNS,
        description=(spec.description if spec else "") or _PLAIN,
        tags=["tarry", str(spec.mode) if spec else "chat"],
        input_modes=_MODES,
        output_modes=_MODES,
    )
    gated = set(spec.require_approval) if spec else set()
    tools = [
        AgentSkill(
            id=f"tool:{tool}",
            name=tool,
            description=f"uses the tool {tool}"
            + (
                ", each call waiting for a person's approval"
                if tool in gated or "*" in gated
                else ""
            ),
            tags=["tool"],
        )
        for tool in ((spec.tools or []) if spec else [])
    ]
    return [own, *tools]


def security_of(sign_in: SignIn) -> tuple[dict[str, SecurityScheme], list[SecurityRequirement]]:
    """The card's security schemes, from the API's sign-in, and its requirements (any one
    scheme suffices): none for an API that asks no one (it listens on loopback only)."""
    if not sign_in.required:
        return {}, []
    schemes: dict[str, SecurityScheme] = {}
    if sign_in.tokens:
        schemes["bearer"] = SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                description=f"a token of this API's users: {sign_in.token_sources()}",
            )
        )
    if sign_in.oidc is not None:
        issuer = sign_in.oidc.table.issuer.rstrip("/")
        schemes["oidc"] = SecurityScheme(
            open_id_connect_security_scheme=OpenIdConnectSecurityScheme(
                open_id_connect_url=f"{issuer}/.well-known/openid-configuration",
                description=f"a JWT of the identity provider {issuer}, as a bearer token",
            )
        )
    requirements = [SecurityRequirement(schemes={name: StringList()}) for name in schemes]
    return schemes, requirements
