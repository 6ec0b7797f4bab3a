"""Configuration: where Temporal is, and the model profiles the workers hold.

Settings come from the environment first (`TEMPORAL_ADDRESS`, `OPENAI_API_KEY`, ...),
then from an optional TOML file (`TARRY_CONFIG`, formerly `TARRY_MODELS_FILE`) of named
model profiles and MCP servers. API keys, MCP commands, URLs and headers live here, on
the worker, and nowhere else: a workflow names a profile or a tool, so none of them
enters history.

Both are checked whole when `TarrySettings` is made, so a process refuses a bad
configuration at its start rather than at the first run that needs it: the file's
tables refuse keys they do not know (`extra="forbid"`), and `load_settings` turns any
problem into one line (`config_problem`) naming the variable, or the file, table and
key, with the nearest valid key for a misspelled one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

from pydantic import (
    AfterValidator,
    AliasChoices,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from temporalio.converter import StorageDriver

from tarry.config.file import ConfigError, ConfigFile, config_problem
from tarry.config.tables import (
    MIN_API_TOKEN_LENGTH,
    PROFILE_DEFAULTS,
    AgentTable,
    ApiTable,
    EmbeddingProfile,
    McpServer,
    ModelProfile,
    NotifyTarget,
    OAuthProvider,
    Prices,
    long_token,
    named_token,
    user_tokens,
)
from tarry.contracts import DEFAULT_TASK_QUEUE, AgentSpec
from tarry.contracts.guardrails import Guardrail
from tarry.core.identities import API_USER, Caller, local_user, name_problem
from tarry.core.ownership import Policy, Visibility
from tarry.core.tools import MAX_READ_BYTES

__all__ = [
    "DEFAULT_API_PORT",
    "DEFAULT_STICKY_TIMEOUT",
    "DEFAULT_WORKFLOW_CACHE",
    "DEFAULT_WORKFLOW_TASK_POLLERS",
    "MIN_API_TOKEN_LENGTH",
    "AgentTable",
    "ConfigError",
    "ConfigFile",
    "EmbeddingProfile",
    "McpServer",
    "ModelProfile",
    "NotifyTarget",
    "OAuthProvider",
    "Prices",
    "TarrySettings",
    "config_problem",
    "load_settings",
]

DEFAULT_WORKFLOW_CACHE = 1000
"""Runs a worker keeps in memory between their workflow tasks: enough for the runs a
worker has awake (working, or waiting on a person who is answering). A run that is
cached resumes where it left off; one that is not (parked long enough to be pushed out,
least recently used first) replays one continue-as-new segment on its next task, once.
Each cached run costs the worker its workflow object and transcript (tens of KiB to a
few MiB). The cache is safe with `workers.legacy_query`, which works around an SDK bug
(docs/sdk-legacy-query-eviction.md); 0 turns it off."""

DEFAULT_WORKFLOW_TASK_POLLERS = 20
"""Concurrent workflow-task polls per worker (the SDK's default: 5). A reply is a
workflow task; with few pollers, replies to many runs at once queue behind each other."""

DEFAULT_STICKY_TIMEOUT = 2.0
"""Seconds a workflow task waits on its worker's sticky queue before any worker of the
task queue may take it (the SDK's default: 10). Short, so that a run whose worker died
moves on after seconds rather than ten; a live worker takes its tasks in milliseconds."""

DEFAULT_API_PORT = 8234
"""The HTTP API's port (`tarry serve`, `tarry dev`): beside the dev server's Web UI (8233)."""

DEFAULT_ACTION_LINK_TTL = 7 * 24 * 3600.0
"""Seconds an action link works when its call has no approval deadline: a week."""


class TarrySettings(BaseSettings):
    """Everything a worker or a client reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", arbitrary_types_allowed=True)

    temporal_address: str = "127.0.0.1:7233"
    """The Temporal frontend, `host:port`."""
    temporal_namespace: str = "default"
    """The Temporal namespace every run lives in."""
    tarry_task_queue: str = Field(default=DEFAULT_TASK_QUEUE, min_length=1)
    """The task queue workers poll and clients start runs on."""
    openai_base_url: str = "https://api.openai.com/v1"
    """The `default` profile's endpoint: OpenAI or any OpenAI-compatible server."""
    openai_api_key: SecretStr | None = None
    """The `default` profile's key; it stays on the worker, never in history."""
    tarry_model: str = "gpt-4o-mini"
    """The `default` profile's model."""
    anthropic_api_key: SecretStr | None = None
    """Set: the workers also hold an `anthropic` profile (Claude, at `ANTHROPIC_BASE_URL`)."""
    anthropic_base_url: str = PROFILE_DEFAULTS["anthropic"]["base_url"]
    """The `anthropic` profile's endpoint."""
    tarry_config: Path | None = Field(
        default=None, validation_alias=AliasChoices("tarry_config", "tarry_models_file")
    )
    """The worker's TOML file: `[profiles.NAME]` tables of `ModelProfile` fields,
    `[mcp_servers.NAME]` tables of `McpServer` fields, `[agents.NAME]` tables of
    sub-agents and `[[notify]]` receivers. `TARRY_MODELS_FILE`, its old name, still works."""
    tarry_workspace_root: Path = Path(".tarry/workspaces")
    """Each run's file tools are confined to `<root>/<run id>`."""
    tarry_read_file_max_bytes: int = Field(default=MAX_READ_BYTES, ge=1)
    """The most `read_file` returns in one call; a larger file is read in parts."""
    tarry_workflow_cache: int = Field(default=DEFAULT_WORKFLOW_CACHE, ge=0)
    """Runs a worker keeps in memory between their workflow tasks; see
    `DEFAULT_WORKFLOW_CACHE`. 0: every workflow task replays its run's segment."""
    tarry_workflow_task_pollers: int = Field(default=DEFAULT_WORKFLOW_TASK_POLLERS, ge=2)
    """Concurrent workflow-task polls (the SDK needs at least 2: sticky and normal)."""
    tarry_sticky_timeout: float = Field(default=DEFAULT_STICKY_TIMEOUT, gt=0)
    """Seconds before a task queued for a worker that stopped polling goes to any other."""
    tarry_connect_timeout: float = Field(default=5.0, gt=0)
    """Seconds a command waits for Temporal to answer its first call. A refused
    connection fails at once; this bounds one that hangs (a firewall, a busy host)."""
    tarry_ui_port: int | None = Field(default=None, ge=1, le=65535)
    """The Web UI port of the dev server `tarry dev` starts; None: the gRPC port + 1000."""
    tarry_encryption_key: SecretStr | None = None
    """A base64-encoded 32-byte AES-256 key (`tarry.temporal.codec.new_key()` makes one). Set, every
    payload is encrypted before it reaches Temporal; every process of a deployment needs
    the same key, and `tarry-codec-server` lets the Web UI decrypt with it."""
    tarry_storage_dir: Path = Path(".tarry/payloads")
    """Where payloads over the threshold and the conversations model calls extend are kept,
    by SHA-256; every process of a deployment must see the same directory (`tarry dev
    --data-dir D` uses `D/payloads`)."""
    tarry_search_index: str | None = None
    """The search index of every run's messages (`tarry search`): a SQLite file's path
    (`tarry dev --data-dir D` uses `D/search.db`), or a PostgreSQL database's URL
    (`postgresql://USER:PASSWORD@HOST/DATABASE`, with the `postgres` extra) for a team.
    Unset: no index, and runs index nothing. Workers write it and the API and command
    line read it, so all of a deployment's processes name the same one."""
    tarry_embedding: EmbeddingProfile | None = None
    """The embedding model of semantic search, as JSON (`{"base_url": ..., "model":
    ...}`), before the config file's `[embedding]`; none of either: search is lexical.
    Workers embed messages with it and the API and command line queries, so every
    process of a deployment names the same one (`tarry dev` its scripted model's)."""
    tarry_api_url: str | None = None
    """An HTTP API (`http://host:8000`) the command line's `tarry search` goes through, as
    the person `TARRY_API_TOKEN` is: they find only the runs they may read. Unset: it
    reads the search index itself, as an operator, every run."""
    tarry_api_token: SecretStr | None = None
    """The bearer token `tarry search` sends to `TARRY_API_URL`."""
    tarry_connections_db: Path = Path(".tarry/connections.db")
    """People's grants to OAuth servers (`[mcp_servers.NAME] auth = "oauth"`,
    `[oauth_providers.NAME]`) and the
    connect flows under way: a SQLite file every worker and API process of a deployment
    shares (`tarry dev --data-dir D` uses `D/connections.db`)."""
    tarry_connections_key: SecretStr | None = None
    """The Fernet key the connections store seals every token with; the same for every
    process. Unset: no OAuth servers can be used (their calls fail, naming this)."""
    tarry_datasets_dir: Path = Path(".tarry/datasets")
    """Where `tarry dataset create` keeps evaluation datasets, `NAME/N.runs.jsonl` beside
    `NAME/N.json`; every process of a deployment that creates or reads datasets (`tarry
    serve`, `tarry dev`, the command line) keeps them here. They hold conversations as
    plain text, so the directories are made owner-only (0700) and the files
    owner-readable (0400)."""
    tarry_dataset_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    """The most bytes one dataset version may take on disk (each run's conversation is
    stored once, so about the sum of its runs' transcripts): a larger one is refused,
    `DATASET_TOO_LARGE`, before anything is written."""
    tarry_dataset_max_points: int = Field(default=10_000, ge=1)
    """The most decision points one dataset version may hold (`DATASET_TOO_LARGE`)."""
    tarry_dataset_max_versions: int = Field(default=100, ge=1)
    """The most versions one dataset may have (`DATASET_TOO_MANY_VERSIONS`)."""
    tarry_storage_threshold: int = Field(default=256 * 1024, ge=0)
    """Payloads of this many bytes or more leave history for the store, which keeps a
    reference in their place."""
    tarry_storage_enabled: bool = True
    """False keeps every payload in history, where Temporal refuses any over 2 MB."""
    tarry_api_port: int = Field(default=DEFAULT_API_PORT, ge=1, le=65535)
    """The port `tarry serve` and `tarry dev` serve the HTTP API on."""
    tarry_api_tokens: Annotated[list[SecretStr], NoDecode, AfterValidator(user_tokens)] = []
    """Bearer tokens the HTTP API accepts, comma-separated in the environment, besides the
    config file's `[api] tokens` and `[api.users]` (see `api_users`): `NAME:TOKEN` names
    the person the token is, a bare `TOKEN` is the user `api`; each token of at least 16
    characters."""
    tarry_public_url: str | None = Field(default=None, pattern=r"^https?://")
    """The HTTP API's address as people reach it (`https://tarry.example`), for the links
    of notifications; unset: `http://localhost:TARRY_API_PORT`."""
    tarry_action_key: Annotated[SecretStr, AfterValidator(long_token)] | None = None
    """The key (16 characters or more) that signs a notification's action links on the
    worker and checks them on the HTTP API; every process of a deployment needs the same.
    Unset (and no `[api] action_key`): notifications carry no action links."""
    tarry_action_link_ttl: float = Field(default=DEFAULT_ACTION_LINK_TTL, gt=0)
    """Seconds an action link works for a call without an approval deadline (a call with
    one: until then)."""
    tarry_a2a_push_private: bool = False
    """Let A2A push configs (which anyone who may read a task sets) name private addresses:
    loopback, the deployment's network, link-local ones. Off, a worker posts only to
    hosts that resolve to public addresses, and the API refuses a config naming a private
    address or `localhost`; on, for a deployment whose receivers are on its own network."""
    tarry_user: str | None = None
    """Who the CLI and `tarry mcp` act as, recorded in the runs; unset: `cli:$USER`."""
    tarry_api_cors_origins: Annotated[list[str], NoDecode] = []
    """Origins whose web pages may call the HTTP API (CORS), comma-separated; none: off.
    `*` (any page) and `null` (a sandboxed frame of any page) only with tokens."""
    tarry_api_allowed_hosts: Annotated[list[str], NoDecode] = []
    """`Host` names the HTTP API answers to besides localhost and loopback addresses (a
    reverse proxy's `tarry.example`, `name:port` for one port), comma-separated; `*`: any.
    Others get 421, so that a page whose name resolves to 127.0.0.1 cannot use it."""
    tarry_task_queue_activities_per_second: float | None = Field(default=None, gt=0)
    """Temporal's rate limit on the activities of the worker's task queue, for all its
    workers together; on a model profile's own queue, that provider's calls per second."""
    tarry_metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """The worker serves Prometheus metrics (the SDK's and Tarry's) on this port; unset:
    no metrics endpoint (see `workers.telemetry`)."""
    tarry_metrics_host: str = "127.0.0.1"
    """The address the metrics endpoint listens on (an IPv4 address, no port); `0.0.0.0`
    in a container."""
    tarry_deployment: str | None = Field(default=None, min_length=1)
    """The worker deployment this worker is a build of; with `TARRY_BUILD_ID`, runs are
    pinned to the build they started on and move at their hand-over (`workers.plugin`)."""
    tarry_build_id: str | None = Field(default=None, min_length=1)
    """This worker's build in `TARRY_DEPLOYMENT`: one per release of the worker's code."""
    tarry_tracing: bool | None = None
    """Trace runs with OpenTelemetry (needs the `otel` extra): where to and how, the
    standard `OTEL_*` variables say (`workers.tracing`). Unset: on when they name an OTLP
    endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT` or `..._TRACES_ENDPOINT`)."""
    tarry_trace_content: bool = False
    """Put prompts, answers and tool arguments and results into the spans, with the model
    profile's key redacted; off: spans carry names, counts and timings only."""
    storage_driver: StorageDriver | None = Field(default=None, exclude=True)
    """Set in code, not from the environment: a driver to use instead of the filesystem,
    e.g. the SDK's `S3StorageDriver` for a cluster (docs: Guides, Encrypted and large payloads)."""
    _file: ConfigFile = PrivateAttr(default_factory=ConfigFile)
    """The `tarry_config` file, read and checked when the settings are made."""

    @field_validator(
        "tarry_api_tokens", "tarry_api_cors_origins", "tarry_api_allowed_hosts", mode="before"
    )
    @classmethod
    def _comma_separated(cls, value: object, info: ValidationInfo) -> object:
        """`a,b` in the environment is the list `["a", "b"]`; blanks are dropped. Tokens
        that are only white space are refused: whoever set them meant a token."""
        if (
            isinstance(value, str)
            and value
            and not value.strip(", \t\n")
            and info.field_name == "tarry_api_tokens"
        ):
            raise ValueError("only white space; a token cannot be blank")
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("tarry_metrics_host")
    @classmethod
    def _address_only(cls, host: str) -> str:
        """The SDK binds `HOST:PORT`, which it parses as a socket address: a host name or
        a bare IPv6 address fails there, with a traceback."""
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            hint = "; give the port as TARRY_METRICS_PORT" if ":" in host else ""
            raise ValueError(
                f"{host!r} is not an IPv4 address (e.g. 127.0.0.1, or 0.0.0.0 for every "
                f"interface){hint}"
            ) from None
        return host

    @model_validator(mode="after")
    def _whole(self) -> TarrySettings:
        """Reads the config file now, so a process refuses a bad one at its start."""
        if self.tarry_config is not None:
            self._file = ConfigFile.read(self.tarry_config)
        if (self.tarry_deployment is None) != (self.tarry_build_id is None):
            raise ValueError(
                "TARRY_DEPLOYMENT and TARRY_BUILD_ID turn versioned deploys on together; "
                "set both (the deployment's name and this worker's build), or neither"
            )
        if problem := self._links_problem() or self._users_problem():
            raise ValueError(problem)
        if problem := self._gateway_problem():
            raise ValueError(problem)
        # Browsers send `Origin: null` from a sandboxed frame on any site, a file, or a
        # redirect across sites: `null` names no page, with tokens or without.
        if any(origin.lower() == "null" for origin in self.tarry_api_cors_origins):
            raise ValueError(
                "TARRY_API_CORS_ORIGINS=null lets any web page (a sandboxed frame on any site"
                " sends Origin: null) pass as a page you trust; name the origins"
            )
        if self.api_tokens() or self._file.api.oidc is not None:
            return self
        if "*" in self.tarry_api_cors_origins:
            raise ValueError(
                "TARRY_API_CORS_ORIGINS=* lets any web page drive the runs of an API without "
                "tokens; name the origins, or set TARRY_API_TOKENS"
            )
        if "*" in self.tarry_api_allowed_hosts:
            raise ValueError(
                "TARRY_API_ALLOWED_HOSTS=* lets any web page whose name resolves to this "
                "machine drive the runs of an API without tokens; name the hosts, or set "
                "TARRY_API_TOKENS"
            )
        return self

    def _gateway_problem(self) -> str | None:
        """What would let a web page pass for `[api] trusted_proxy`: a page under a
        rebound name on the gateway's machine could send its headers, tokens or not
        (`Origin: null`, which the gateway would sign in too, is refused always)."""
        if self._file.api.trusted_proxy and "*" in self.tarry_api_allowed_hosts:
            return (
                "TARRY_API_ALLOWED_HOSTS=* with the config's [api] trusted_proxy lets a page"
                " whose name resolves to the gateway's machine send the gateway's headers;"
                " name the hosts"
            )
        return None

    def _users_problem(self) -> str | None:
        """What makes the API's users ambiguous: two users with one token (the first
        would act for both), or a name no person may have (`identities.name_problem`:
        a group's, as approvers name both; one the runs record for no person; one with
        invisible characters), as `TARRY_API_TOKENS`, `[api.users]` or `[api.oidc.users]`
        names them."""
        owners: dict[str, str] = {}
        for caller, token in self.api_users():
            other = owners.setdefault(token.get_secret_value(), caller.user)
            if other != caller.user:
                return (
                    f"the users {other!r} and {caller.user!r} have one token; give each their own"
                )
        api = self._file.api
        named = [("TARRY_API_TOKENS", named_token(entry)[0]) for entry in self.tarry_api_tokens]
        named += [(f"{self.tarry_config}: [api.users]", user) for user in api.users]
        mapped = api.oidc.users if api.oidc else {}
        named += [(f"{self.tarry_config}: [api.oidc.users]", user) for user in mapped]
        for where, user in named:
            if problem := name_problem(user, api.groups):
                return f"{where}: {problem}"
        return None

    def _links_problem(self) -> str | None:
        """What keeps a `[[notify]]` entry's `to` from getting action links: a name no
        token names (a typo would leave the links out without a word), or no key to sign
        them with."""
        users = {user.user for user, _ in self.api_users()}
        for index, target in enumerate(self._file.notify, start=1):
            if target.to is None:
                continue
            entry = f"{self.tarry_config}: [[notify]] entry {index}: to = {target.to!r}"
            if target.to not in users:
                known = ", ".join(sorted(users)) or "none"
                return (
                    f'{entry} names no user (users: {known}); add {target.to} = "TOKEN" to'
                    " [api.users] (or TARRY_API_TOKENS=NAME:TOKEN), or leave `to` out"
                )
            if self.action_key() is None:
                return (
                    f"{entry} needs an action key to sign its links; set [api] action_key"
                    " or TARRY_ACTION_KEY (16 characters or more), or leave `to` out"
                )
        return None

    def model_profiles(self) -> dict[str, ModelProfile]:
        """The `default` profile from the environment (and the `anthropic` one when
        `ANTHROPIC_API_KEY` is set), plus the file's named profiles."""
        profiles = {
            "default": ModelProfile(
                base_url=self.openai_base_url,
                model=self.tarry_model,
                api_key=self.openai_api_key,
            )
        }
        if self.anthropic_api_key is not None:
            profiles["anthropic"] = ModelProfile(
                provider="anthropic",
                base_url=self.anthropic_base_url,
                api_key=self.anthropic_api_key,
            )
        return profiles | self._file.profiles

    def api_tokens(self) -> list[SecretStr]:
        """The HTTP API's bearer tokens: `TARRY_API_TOKENS` and the config file's `[api]
        tokens` and `[api.users]`. With any, every route but `/healthz` needs one; with
        none, the API listens only on loopback."""
        return [token for _, token in self.api_users()]

    def api_authenticates(self) -> bool:
        """Whether the HTTP API (and `tarry mcp --http`) asks who a request is: it has
        bearer tokens, an identity provider (`[api.oidc]`) or a sign-in gateway (`[api]
        trusted_proxy`). If not, it serves only loopback, every request as the local user
        (`local_caller`), as the CLI's."""
        api = self._file.api
        return bool(self.api_tokens() or api.oidc or api.trusted_proxy)

    def api_table(self) -> ApiTable:
        """The config file's `[api]` table: its identity provider and sign-in gateway."""
        return self._file.api

    def api_token_sources(self) -> str:
        """Where the HTTP API's tokens come from, as a person would look there:
        `TARRY_API_TOKENS`, the config file's `[api] tokens` or `[api.users]`."""
        places = [
            name
            for name, tokens in (
                ("TARRY_API_TOKENS", self.tarry_api_tokens),
                ("the config file's [api] tokens", self._file.api.tokens),
                ("the config file's [api.users]", self._file.api.users),
            )
            if tokens
        ]
        return " or ".join(places) or "TARRY_API_TOKENS"

    def api_users(self) -> list[tuple[Caller, SecretStr]]:
        """Each bearer token with the person it names and their groups."""
        named = [named_token(entry) for entry in self.tarry_api_tokens]
        named += [(API_USER, token) for token in self._file.api.tokens]
        named += list(self._file.api.users.items())
        return [(self.caller(user), token) for user, token in named]

    def caller(self, user: str, groups: Sequence[str] = ()) -> Caller:
        """`user` in `groups` (those their sign-in names) and those `[api.groups]` puts
        them in, with the limits `[limits]` gives them there (None without `[limits]`)."""
        configured = (group for group, users in self._file.api.groups.items() if user in users)
        every = tuple(dict.fromkeys([*(g for g in groups if g), *configured]))
        limits = self._file.limits
        return Caller(user, every, limits=None if limits is None else limits.of(user, every))

    def day_time_zone(self) -> str:
        """Where a day of the daily caps begins (`[limits] time_zone`; UTC without it)."""
        return "UTC" if self._file.limits is None else self._file.limits.time_zone

    def policy(self) -> Policy:
        """Who may use which runs through the API (`tarry.core.ownership`): `[api] visibility`
        (by default private once users are named: a token naming its user, an identity
        provider or a sign-in gateway), and `[api] admins`; with no sign-in at all, the one
        person at this machine has every right."""
        if not self.api_authenticates():
            return Policy()
        api = self._file.api
        named = bool(api.oidc or api.trusted_proxy) or any(
            caller.user != API_USER for caller, _ in self.api_users()
        )
        default = Visibility.PRIVATE if named else Visibility.TEAM
        return Policy.of(api.visibility or default, api.admins)

    def local_caller(self) -> Caller:
        """Who the CLI and `tarry mcp` act as: `TARRY_USER`, else `cli:$USER`."""
        return self.caller(local_user(self.tarry_user))

    def notify_targets(self) -> list[NotifyTarget]:
        """The config file's `[[notify]]` entries."""
        return list(self._file.notify)

    def guardrails(self) -> list[Guardrail]:
        """The config file's `[[guardrail]]` entries, in order."""
        return list(self._file.guardrail)

    def action_key(self) -> SecretStr | None:
        """The key of action links: `TARRY_ACTION_KEY`, else the file's `[api] action_key`."""
        return self.tarry_action_key or self._file.api.action_key

    def public_url(self) -> str:
        """Where people reach the HTTP API and its inbox (`TARRY_PUBLIC_URL`)."""
        return (self.tarry_public_url or f"http://localhost:{self.tarry_api_port}").rstrip("/")

    def mcp_servers(self) -> dict[str, McpServer]:
        """The config file's `[mcp_servers.NAME]` tables."""
        return dict(self._file.mcp_servers)

    def oauth_providers(self) -> dict[str, OAuthProvider]:
        """The config file's `[oauth_providers.NAME]` tables."""
        return dict(self._file.oauth_providers)

    def embedding_profile(self) -> EmbeddingProfile | None:
        """The embedding model of semantic search: `TARRY_EMBEDDING`, else the config
        file's `[embedding]`; None: search is lexical."""
        return self.tarry_embedding or self._file.embedding

    def agents(self) -> dict[str, AgentSpec]:
        """The config file's `[agents.NAME]` tables: the sub-agents runs may delegate to."""
        return {name: table.spec() for name, table in self._file.agents.items()}

    def a2a_headers(self) -> dict[str, dict[str, str]]:
        """The headers of each remote agent's requests (`[agents.NAME] a2a_headers`)."""
        return {
            name: {key: value.get_secret_value() for key, value in table.a2a_headers.items()}
            for name, table in self._file.agents.items()
            if table.a2a is not None
        }


def load_settings() -> TarrySettings:
    """The settings from the environment and the `TARRY_CONFIG` file, checked whole;
    what every entry point starts with. Raises `ConfigError`: one line saying what is
    wrong and where."""
    try:
        return TarrySettings()
    except ValidationError as e:
        raise ConfigError(config_problem(e)) from None
