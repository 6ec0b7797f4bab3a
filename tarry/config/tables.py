"""The tables of Tarry's config file (`TARRY_CONFIG`): model profiles, MCP servers,
sub-agents, the HTTP API's users and `[[notify]]` receivers. Each refuses keys it does not
know (`extra="forbid"`), so a misspelled key is an error at start, never a setting quietly
off; `tarry.config.settings.ConfigFile` holds them whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    IPvAnyNetwork,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from tarry.contracts import AgentSpec, NotifyEvent, Sampling, Usage
from tarry.contracts.run import principal_problem
from tarry.core.identities import API_USER, GROUP_PREFIX, member_problem
from tarry.core.ownership import Visibility

__all__ = [
    "ANTHROPIC_MAX_TOKENS",
    "MIN_API_TOKEN_LENGTH",
    "OIDC_ALGORITHMS",
    "PROFILE_DEFAULTS",
    "AgentTable",
    "ApiTable",
    "EmbeddingProfile",
    "McpServer",
    "ModelProfile",
    "NotifyTarget",
    "OAuthClient",
    "OAuthProvider",
    "OidcTable",
    "Prices",
    "Provider",
    "ServerLimits",
    "fallback_problem",
    "long_token",
    "named_token",
    "user_tokens",
]


Provider = Literal["openai", "anthropic"]
"""The dialect a profile's endpoint speaks: OpenAI-compatible `chat.completions`, or
Anthropic's Messages API."""


MIN_API_TOKEN_LENGTH = 16
"""A shorter bearer token can be guessed; `secrets.token_urlsafe()` makes 43 characters."""


class Prices(BaseModel):
    """A model's prices in US dollars per million tokens, as its provider's rate sheet
    gives them: what the worker estimates each call's cost with (`Usage.cost_usd`)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    """Input read back from the provider's prompt cache; none: at `input`."""
    cache_write: float | None = Field(default=None, ge=0)
    """Input written to the provider's prompt cache; none: at `input`."""

    def cost_of(self, usage: Usage) -> float:
        """The estimated cost of one call's `usage`, in US dollars: input read from or
        written to a prompt cache at its own price (`input` where none is given)."""
        cached = usage.cache_read_tokens + usage.cache_write_tokens
        full_price = (usage.prompt_tokens - cached) * self.input
        reads = usage.cache_read_tokens * (
            self.input if self.cache_read is None else self.cache_read
        )
        writes = usage.cache_write_tokens * (
            self.input if self.cache_write is None else self.cache_write
        )
        output = usage.completion_tokens * self.output
        return (full_price + reads + writes + output) / 1_000_000


PROFILE_DEFAULTS: dict[str, dict[str, str]] = {
    "openai": {"base_url": "https://api.openai.com/v1", "model": "gpt-4o-mini"},
    # As the Anthropic SDK's ANTHROPIC_BASE_URL: without `/v1`.
    "anthropic": {"base_url": "https://api.anthropic.com", "model": "claude-sonnet-4-5"},
}
ANTHROPIC_MAX_TOKENS = 4096
"""The answer length asked of Anthropic when no `max_tokens` is set: its API needs one."""


class ModelProfile(Sampling):
    """One endpoint, the model to ask there, and how it samples (the `Sampling` fields,
    checked at load; a run may override them)."""

    provider: Provider = "openai"
    base_url: str = ""
    """Empty: the provider's own (`https://api.openai.com/v1`, `https://api.anthropic.com`)."""
    model: str = ""
    """Empty: `gpt-4o-mini` for OpenAI, `claude-sonnet-4-5` for Anthropic."""
    api_key: SecretStr | None = None
    anthropic_version: str = "2023-06-01"
    """The `anthropic-version` header of Anthropic requests."""
    request_timeout: float = Field(default=120.0, gt=0)
    """Seconds one HTTP call may take; past that the call fails with `LLM_TIMEOUT`."""
    context_budget: int = Field(default=100_000, gt=0)
    """Tokens (estimated) of conversation sent per call: the system prompt plus the newest
    messages that fit. The durable transcript always stays whole."""
    stream: bool = True
    """Ask for the answer as a stream, so observers see its words as they come; off for
    a server whose streaming misbehaves. The transcript is the same either way."""
    prices: Prices | None = None
    """Dollars per million tokens, to estimate each call's cost; none: calls cost 0."""
    task_queue: str | None = None
    """The activity task queue this profile's model calls are scheduled on (null: the
    run's own), so the workers serving it, and their rate limit, govern this provider.
    Every worker that starts runs on it must name the same queue: a run resolves it once,
    at its start."""
    fallback: list[str] = Field(default_factory=list)
    """Profiles that answer a turn, in order, while this one's provider is down (its
    circuit open, `activities.circuits`); empty: none, an outage is waited out."""
    fallback_after: int = Field(default=3, ge=1)
    """Failed tries in a row (5xx, 429, a timeout) on one worker that open the circuit."""
    fallback_cooldown: float = Field(default=60.0, gt=0)
    """Seconds an open circuit sends calls to the fallback before this profile is tried again."""
    cache: bool = False
    """Answer a call identical to one answered before from the response cache, at no cost
    (`activities.response_cache`); never for a sensitive run or one under a `pii` guardrail."""
    cache_ttl: float = Field(default=3600.0, gt=0)
    """Seconds a cached answer is used for."""
    cache_entries: int = Field(default=1000, ge=1)
    """Answers the cache keeps on each worker; the least recently used goes first."""

    @model_validator(mode="after")
    def _provider_defaults(self) -> ModelProfile:
        defaults = PROFILE_DEFAULTS[self.provider]
        self.base_url = self.base_url or defaults["base_url"]
        self.model = self.model or defaults["model"]
        return self


class EmbeddingProfile(BaseModel):
    """The embedding model semantic search asks (`[embedding]`, or `TARRY_EMBEDDING` as
    JSON): an OpenAI-compatible `/v1/embeddings` endpoint. Workers embed each message as
    they index it, and the API and command line each query, with the same profile: a
    vector means something only beside vectors of the same model."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = PROFILE_DEFAULTS["openai"]["base_url"]
    model: str = "text-embedding-3-small"
    api_key: SecretStr | None = None
    dimensions: int | None = Field(default=None, gt=0)
    """The vectors' length, asked of models that can shorten them (OpenAI's
    `text-embedding-3`); none: the model's own. Changing it, or the model, needs `tarry
    index rebuild`: the index holds vectors of one length."""
    request_timeout: float = Field(default=30.0, gt=0)
    """Seconds one HTTP call may take."""
    batch: int = Field(default=64, ge=1)
    """Texts embedded in one request."""
    max_characters: int = Field(default=8000, ge=1)
    """The start of a longer text is what is embedded: a model embeds so many tokens at
    most (OpenAI's 8,191; a llama.cpp server its batch's), and a message's meaning is
    mostly in its beginning. Its words are all indexed all the same."""
    price: float = Field(default=0.0, ge=0)
    """US dollars per million input tokens, to estimate each call's cost (`Usage.cost_usd`)."""


def fallback_problem(profiles: dict[str, ModelProfile]) -> str | None:
    """What makes a profile's `fallback` unusable: itself, or a name no profile has
    (`default` and `anthropic` come from the environment)."""
    known = {*profiles, "default", "anthropic"}
    for name, profile in profiles.items():
        for other in profile.fallback:
            if other == name:
                return f"[profiles.{name}] falls back to itself; name another profile"
            if other not in known:
                return (
                    f"[profiles.{name}] falls back to {other!r}, which is no profile "
                    f"(profiles: {', '.join(sorted(known))})"
                )
    return None


class OAuthClient(BaseModel):
    """What Tarry is at an OAuth authorization server, and what a connect asks it for:
    the fields an MCP server with `auth = "oauth"` and an `[oauth_providers.NAME]` share."""

    scopes: list[str] = []
    """The scopes a connect asks for; none: the server's default (its metadata's
    `scopes_supported`)."""
    client_id: str | None = None
    """A client registered beforehand at the authorization server; unset: registered
    dynamically (RFC 7591) at each connect, where the server offers it."""
    client_secret: str | None = None


class McpServer(OAuthClient):
    """An MCP server whose tools join the runs' catalogues as `NAME__TOOL`: a command the
    worker starts (stdio) or a URL (streamable HTTP). Its secrets (`env`, `headers`) stay
    on the worker: history only ever names the server."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    """The program to start (stdio); the worker starts it again if it dies."""
    args: list[str] = []
    env: dict[str, str] = {}
    """Set for the process on top of a minimal environment (the MCP SDK's default)."""
    cwd: Path | None = None
    url: str | None = None
    """A streamable HTTP endpoint, e.g. `http://127.0.0.1:8000/mcp`."""
    headers: dict[str, str] = {}
    """Sent with every HTTP request, e.g. `Authorization`."""
    destructive_needs_approval: bool = True
    """A tool annotated `destructiveHint: true` waits for a person's decision; false
    lets this server's destructive tools run like any other."""
    auth: Literal["headers", "oauth"] = "headers"
    """`headers`: the `headers` above, one identity for everyone. `oauth`: each call
    carries a person's own grant (see `token`), found by the server's protected-resource
    metadata and given at a connect link; a run whose person has not connected waits for
    it (`waiting_for: auth`)."""
    token: Literal["owner", "approver", "service"] = "owner"
    """Whose grant a call carries: the run's owner, the person who approved the call,
    or nobody's (`service`: the `headers`, as without OAuth)."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs either `command` (stdio) or `url` (HTTP)")
        return self


class OAuthProvider(OAuthClient):
    """`[oauth_providers.NAME]`: an OAuth authorization server whose grants a worker's own
    tools call HTTP APIs with, as a person (`@tool(oauth="NAME")`). People connect to it
    at the same link, and runs wait for them the same way, as for an MCP server with
    `auth = "oauth"`; `NAME` is what the connect link and `auth_needed` call it."""

    model_config = ConfigDict(extra="forbid")

    issuer: str | None = None
    """The authorization server's issuer URL: its endpoints are read from its metadata
    (RFC 8414, or OpenID discovery) at each connect."""
    authorization_endpoint: str | None = None
    """Without an `issuer`: where people consent (with `token_endpoint` and `client_id`)."""
    token_endpoint: str | None = None
    """Without an `issuer`: where codes are traded for grants and grants refreshed."""
    resource: str | None = None
    """The API the grant is for (RFC 8707 `resource`), for a server that asks for one."""

    @model_validator(mode="after")
    def _endpoints_known(self) -> OAuthProvider:
        explicit = self.authorization_endpoint is not None and self.token_endpoint is not None
        if (self.issuer is None) == (not explicit):
            raise ValueError(
                "an OAuth provider needs either `issuer` (its endpoints are discovered) or"
                " both `authorization_endpoint` and `token_endpoint`"
            )
        if explicit and self.client_id is None:
            raise ValueError(
                "an OAuth provider without an `issuer` needs `client_id`: nothing tells"
                " where it would register one"
            )
        return self


class AgentTable(AgentSpec):
    """A sub-agent, `[agents.NAME]`: a run whose `agents` names it may hand it tasks
    (the tool `agent__NAME`), each a child run with these settings, or with `a2a` a task
    of that remote agent."""

    model_config = ConfigDict(extra="forbid")

    a2a_headers: dict[str, SecretStr] = Field(default={})
    """Headers each request to the remote agent carries (`Authorization = "Bearer ..."`):
    the worker's alone, never in a run's history (`spec` leaves them out)."""

    def spec(self) -> AgentSpec:
        """The agent as a run resolves it: its settings, without the worker's secrets."""
        return AgentSpec.model_validate(self.model_dump(exclude={"a2a_headers"}))


class NotifyTarget(BaseModel):
    """A `[[notify]]` entry: a receiver the worker tells of runs' stop points, with a
    signed POST (see `activities.notifications`). Its URL and secret stay on the worker."""

    model_config = ConfigDict(extra="forbid")

    url: Annotated[str, Field(pattern=r"^https?://")]
    """Where the notifications are POSTed (a Slack incoming webhook's URL, for `slack`)."""
    events: Annotated[list[NotifyEvent], Field(min_length=1)]
    """Which stop points: `waiting_for_input`, `waiting_for_approval`,
    `waiting_for_budget`, `ended`. Each kind of wait says which it is told as
    (`WaitKind.notify`): a paused run's is `waiting_for_input`."""
    secret: SecretStr | None = None
    """Signs each notification (`Tarry-Signature`); needed but for `format = "slack"`."""
    format: Literal["json", "slack"] = "json"
    """`json`: Tarry's payload; `slack`: a Slack incoming webhook's blocks, with buttons."""
    to: str | None = None
    """The user the notification is for: its approve and reject links (with an action
    key) decide as them; none: no action links."""

    @model_validator(mode="after")
    def _signed(self) -> NotifyTarget:
        if self.secret is None and self.format == "json":
            raise ValueError(
                'a `secret` signs the notifications; only `format = "slack"` goes without'
            )
        return self


def _long_enough(tokens: list[SecretStr]) -> list[SecretStr]:
    """Refuses a bearer token of the HTTP API that is short enough to guess, or holds
    white space (no `Authorization` header carries it whole), without showing it."""
    if any(t.get_secret_value().split() != [t.get_secret_value()] for t in tokens):
        raise ValueError(
            "a token cannot hold white space: no Authorization header carries it whole"
        )
    if any(len(token.get_secret_value()) < MIN_API_TOKEN_LENGTH for token in tokens):
        raise ValueError(
            f"a token needs at least {MIN_API_TOKEN_LENGTH} characters to be safe from "
            "guessing; make one with: python -c 'import secrets; print(secrets.token_urlsafe())'"
        )
    return tokens


def long_token(token: SecretStr) -> SecretStr:
    return _long_enough([token])[0]


def user_tokens(entries: list[SecretStr]) -> list[SecretStr]:
    """Refuses a `NAME:TOKEN` entry of `TARRY_API_TOKENS` whose token is short or whose
    name is empty (a bare token has no colon)."""
    _long_enough([named_token(entry)[1] for entry in entries])
    if any(named_token(entry)[0] == "" for entry in entries):
        raise ValueError("a NAME:TOKEN entry needs a name before the colon")
    return entries


def named_token(entry: SecretStr) -> tuple[str, SecretStr]:
    """`NAME:TOKEN` as its user and token; a bare token is the user `api`."""
    name, colon, token = entry.get_secret_value().partition(":")
    return (name, SecretStr(token)) if colon else (API_USER, entry)


OIDC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
"""The signatures an identity provider's tokens may carry: public-key ones only. `none`
signs nothing, and an `HS*` token is signed with a shared secret, which for a JWKS would
be the public key itself: anyone could sign one."""


class OidcTable(BaseModel):
    """`[api.oidc]`: bearer JWTs from the company's identity provider (`tarry.api.oidc`)."""

    model_config = ConfigDict(extra="forbid")

    issuer: Annotated[str, Field(pattern=r"^https?://")]
    """The provider's issuer URL, exactly as its tokens' `iss` names it."""
    audience: Annotated[str, Field(min_length=1)]
    """The `aud` the tokens must be for: the client id (or API identifier) Tarry has there."""
    jwks_url: Annotated[str, Field(pattern=r"^https?://")] | None = None
    """Where the provider publishes its signing keys; none: the `jwks_uri` of the issuer's
    discovery document (`ISSUER/.well-known/openid-configuration`)."""
    user_claim: Annotated[str, Field(min_length=1)] = "sub"
    """The claim that names the user (`sub`, `email`, `preferred_username`, ...): `sub`,
    by default, is the one the provider never gives to another person."""
    users: dict[str, str] = {}
    """`[api.oidc.users]`: the name of each user the `user_claim` names (`alice =
    "00u1a2b3"`); any other is `oidc:CLAIM` (`tarry.api.oidc`)."""
    groups_claim: str | None = "groups"
    """The claim that lists the user's groups, besides those of `[api.groups]`; none: only those."""
    algorithms: Annotated[list[str], Field(min_length=1)] = list(OIDC_ALGORITHMS)
    """The signature algorithms accepted; a token signed otherwise is refused."""
    leeway: float = Field(default=30.0, ge=0, le=300)
    """Seconds of clock skew allowed on `exp`, `nbf` and `iat`."""
    jwks_cooldown: float = Field(default=30.0, ge=0)
    """Seconds between two fetches of the keys for a token whose `kid` they lack (a key the
    provider rotated in), so that tokens naming made-up keys cannot flood the provider."""
    fetch_timeout: float = Field(default=5.0, gt=0, le=60)
    """Seconds the discovery document or the keys may take to arrive; past them, a JWT
    waiting for them is 503 `IDENTITY_PROVIDER_UNAVAILABLE`."""
    discovery_cooldown: float = Field(default=30.0, ge=0)
    """Seconds a failed fetch of the discovery document answers for: JWTs meanwhile are
    503 `IDENTITY_PROVIDER_UNAVAILABLE` at once, and the provider is not asked again."""

    @field_validator("users")
    @classmethod
    def _one_name_each(cls, users: dict[str, str]) -> dict[str, str]:
        """One claim, one person: a claim mapped twice would sign in as either."""
        names: dict[str, str] = {}
        for name, claim in users.items():
            other = names.setdefault(claim, name)
            if other != name:
                raise ValueError(f"{other!r} and {name!r} are both {claim!r}; map it once")
        return users

    @field_validator("algorithms")
    @classmethod
    def _public_key_only(cls, algorithms: list[str]) -> list[str]:
        refused = [a for a in algorithms if a not in OIDC_ALGORITHMS]
        if refused:
            raise ValueError(
                f"{', '.join(refused)}: not a public-key signature; an identity provider's"
                f" tokens are checked against its published keys with {', '.join(OIDC_ALGORITHMS)}"
            )
        return algorithms


class ServerLimits(BaseModel):
    """`[api.limits]`: how long a connection to the HTTP API (or `tarry mcp --http`) may
    take to say what it wants, and how many requests it serves at once, so that
    connections left open or sent a byte at a time cannot pile up (`tarry.api.limits`);
    and, if set, each user's share (`tarry.api.quotas`)."""

    model_config = ConfigDict(extra="forbid")

    header_timeout: float = Field(default=10.0, gt=0, le=300)
    """Seconds a request's line and headers may take to arrive whole, from the
    connection's opening (or the request's first byte, on a kept-alive connection);
    past them the server closes the connection."""
    idle_timeout: int = Field(default=5, ge=1, le=3600)
    """Seconds a connection may stay open, idle, after a response."""
    max_concurrent_requests: int = Field(default=500, ge=1)
    """Requests served at once, event streams included; beyond them, 503
    `SERVICE_UNAVAILABLE` with `Retry-After`."""
    starts_per_minute: int | None = Field(default=None, ge=1)
    """Requests that may start a run (`POST /v1/runs`, a fork, a message with
    `?start=true`, an AG-UI exchange) each user may send in a minute; beyond them, 429
    `QUOTA_EXCEEDED` with `Retry-After`. None: no cap."""
    streams_per_user: int | None = Field(default=None, ge=1)
    """Event streams (`/v1/runs/{id}/events`) each user may hold open at once; beyond
    them, 429 `QUOTA_EXCEEDED`. None: no cap."""


class ApiTable(BaseModel):
    """The config file's `[api]` table."""

    model_config = ConfigDict(extra="forbid")

    tokens: Annotated[list[SecretStr], AfterValidator(_long_enough)] = []
    """Bearer tokens of the user `api`, besides `TARRY_API_TOKENS`."""
    users: dict[str, Annotated[SecretStr, AfterValidator(long_token)]] = {}
    """`[api.users]`: each person's name and their token (`alice = "TOKEN"`); the runs
    record what they do under that name."""
    groups: dict[str, list[str]] = {}
    """`[api.groups]`: groups of users (`ops = ["alice", "bob"]`), for `RunInput.approvers`,
    `RunInput.share` and `admins` (as `group:ops`)."""
    admins: list[str] = []
    """Users and `group:NAME`s who may read and do everything to every run."""
    visibility: Visibility | None = None
    """`private`: each user finds and uses their own runs, those shared with them and
    those they approve calls of; `team`: every user every run. Default: `private` when
    the API names its users (`[api.users]`, `NAME:TOKEN`), else `team`."""

    @field_validator("groups")
    @classmethod
    def _member_names(cls, groups: dict[str, list[str]]) -> dict[str, list[str]]:
        """Each group is named as a share names it, and holds people (`member_problem`)."""
        for group, members in groups.items():
            if problem := principal_problem(f"{GROUP_PREFIX}{group}"):
                raise ValueError(problem)
            for member in members:
                if problem := member_problem(member, groups):
                    raise ValueError(f"{group}: {problem}")
        return groups

    @field_validator("admins")
    @classmethod
    def _admin_names(cls, admins: list[str], info: ValidationInfo) -> list[str]:
        """Groups as `group:NAME`, and people (`member_problem`)."""
        groups = info.data.get("groups", {})
        for name in admins:
            problem = principal_problem(name)
            if not name.startswith(GROUP_PREFIX):
                problem = problem or member_problem(name, groups)
            if problem:
                raise ValueError(problem)
        return admins

    action_key: Annotated[SecretStr, AfterValidator(long_token)] | None = None
    """Signs and checks action links (as `TARRY_ACTION_KEY`, which wins)."""
    oidc: OidcTable | None = None
    """`[api.oidc]`: bearer JWTs of an identity provider, besides the tokens above."""
    trusted_proxy: list[IPvAnyNetwork] = []
    """Addresses (`10.0.0.5`) or networks (`10.0.0.0/24`) of a sign-in gateway (oauth2-proxy,
    a company SSO proxy) whose `forwarded_user_header` names the user of a request; from
    any other address that header is ignored."""
    forwarded_user_header: Annotated[str, Field(pattern=r"^[A-Za-z0-9-]+$")] = "X-Forwarded-User"
    """The header in which `trusted_proxy` names the user."""
    forwarded_groups_header: Annotated[str, Field(pattern=r"^[A-Za-z0-9-]+$")] = (
        "X-Forwarded-Groups"
    )
    """The header in which `trusted_proxy` lists the user's groups, comma-separated."""
    limits: ServerLimits = ServerLimits()
    """`[api.limits]`: the server's timeouts and how many requests it serves at once."""
