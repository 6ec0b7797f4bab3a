"""The names an agent run is known by in Temporal: its workflow and activity types, search
attributes and memo, and the enumerations and error codes its contracts speak in."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel
from temporalio.common import SearchAttributeKey

__all__ = [
    "AGENT_TOOL_PREFIX",
    "CATALOGUE_CHECK_ACTIVITY",
    "CATALOGUE_CHECK_WORKFLOW",
    "CHECKED_CATALOGUE_ACTIVITY",
    "COST_ATTRIBUTE",
    "DECIDED_WAITS",
    "DEFAULT_TASK_QUEUE",
    "FINISH_TOOL",
    "INTERRUPTED_NOTE",
    "LLM_ACTIVITY",
    "MAX_INPUT_BYTES",
    "MCP_TOOL_ACTIVITY",
    "MODEL_ATTRIBUTE",
    "NOTIFY_ACTIVITY",
    "OWNER_ATTRIBUTE",
    "PAGE_ACTIVITY",
    "PAGE_INDEX_ACTIVITY",
    "PHASE_ATTRIBUTE",
    "READERS_ATTRIBUTE",
    "SEARCH_ATTRIBUTES",
    "START_KEY_ATTRIBUTE",
    "SUMMARY_MEMO",
    "TEMPORAL_UI",
    "TOOL_CATALOGUE_ACTIVITY",
    "TURNS_ATTRIBUTE",
    "WAITING_FOR_ATTRIBUTE",
    "WORKFLOW_TYPE",
    "WRITERS_ATTRIBUTE",
    "ApprovalDefault",
    "ErrorCode",
    "ErrorInfo",
    "Mode",
    "NotifyEvent",
    "Phase",
    "ReplyPolicy",
    "Share",
    "WaitingFor",
    "principal_problem",
]

WORKFLOW_TYPE = "AgentRun"
DEFAULT_TASK_QUEUE = "tarry"
LLM_ACTIVITY = "call_llm"
TOOL_CATALOGUE_ACTIVITY = "tool_catalogue"
CATALOGUE_CHECK_ACTIVITY = "catalogue_check"
"""Asks a worker whether it would refuse a run's tools, agents or model profile, before a
client starts the run, so a refused start leaves no run and no workflow behind
(`tarry.client.starting.asked_the_workers`). Today's clients ask `checked_catalogue`, and
this one only of a worker from before it, or in a `CatalogueCheck` workflow."""
CHECKED_CATALOGUE_ACTIVITY = "checked_catalogue"
"""`catalogue_check` with the catalogue the run would resolve in the answer: the client
runs it as `catalogue_check` is run and starts the run with that catalogue, so the run
resolves nothing of its own (`tarry.contracts.CheckedCatalogue`)."""
CATALOGUE_CHECK_WORKFLOW = "CatalogueCheck"
"""A short workflow, not a run, that runs `catalogue_check` for a client on a server without
standalone activities."""
PAGE_ACTIVITY = "store_transcript_page"
"""The activity that moves a run's older messages into a page in the payload store."""
PAGE_INDEX_ACTIVITY = "store_transcript_page_index"
"""The activity that moves the references of a run's oldest pages into an index."""
MCP_TOOL_ACTIVITY = "mcp_tool"
"""The activity that calls a tool of an MCP server; its summary names the server and tool."""
NOTIFY_ACTIVITY = "notify"
"""The activity that tells the receivers of the worker's `[[notify]]` entries of a run's
stop point (`Notification`)."""
FINISH_TOOL = "finish"
AGENT_TOOL_PREFIX = "agent__"
"""A run offers each agent of `RunInput.agents` as the tool `agent__NAME`."""
INTERRUPTED_NOTE = "[interrupted by the user]"
"""How the model reads an answer of its own that a `stop` cut short."""
MAX_INPUT_BYTES = 4 * 1024 * 1024
"""The largest reply, in UTF-8 bytes, that the client sends and `send` accepts. Replies
over the storage threshold leave history for the payload store, so this bounds what one
message adds to every model call, not to history."""

SUMMARY_MEMO = "summary"
"""The memo key of a run's summary, the first line of its prompt (or a sub-agent's task)."""

# Search attributes, upserted on every phase change, so operators can list runs by phase.
PHASE_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryPhase")
TURNS_ATTRIBUTE = SearchAttributeKey.for_int("TarryTurns")
MODEL_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryModel")
WAITING_FOR_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryWaitingFor")
COST_ATTRIBUTE = SearchAttributeKey.for_float("TarryCostUsd")
"""The run's estimated cost so far, from its profiles' prices: `TarryCostUsd > 5`."""
# Set once, when the run starts (`tarry.core.ownership`): who may find and read it, so that a
# list is a visibility query. A continue-as-new keeps them; a sub-agent gets its lead's.
OWNER_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryOwner")
"""Who started the run (a sub-agent: its lead's owner; a schedule's run: the schedule's)."""
READERS_ATTRIBUTE = SearchAttributeKey.for_keyword_list("TarryReaders")
"""Users and `group:NAME`s who may read the run besides its owner: its `share` and its
approvers."""
WRITERS_ATTRIBUTE = SearchAttributeKey.for_keyword_list("TarryWriters")
"""Users and `group:NAME`s its `share` lets reply, pause, stop, raise, switch and fork."""
START_KEY_ATTRIBUTE = SearchAttributeKey.for_keyword("TarryStartKey")
"""The digest of the `Idempotency-Key` a run was started with through the API, so that every
API process, not only the one that started it, finds the run a key started."""
SEARCH_ATTRIBUTES = (
    PHASE_ATTRIBUTE,
    TURNS_ATTRIBUTE,
    MODEL_ATTRIBUTE,
    WAITING_FOR_ATTRIBUTE,
    COST_ATTRIBUTE,
    OWNER_ATTRIBUTE,
    READERS_ATTRIBUTE,
    WRITERS_ATTRIBUTE,
    START_KEY_ATTRIBUTE,
)


class Phase(StrEnum):
    """Where a run stands: working, waiting for a person, or ended for good."""

    RUNNING = "Running"
    WAITING_USER = "WaitingUser"
    COMPLETED = "Completed"
    FAILED = "Failed"

    @property
    def ended(self) -> bool:
        return self in (Phase.COMPLETED, Phase.FAILED)


class WaitingFor(StrEnum):
    """What a `WaitingUser` run waits for."""

    INPUT = "input"
    APPROVAL = "approval"
    GUARDRAIL = "guardrail"
    """A guardrail whose verdict is `ask` flagged a text: one of its approvers allows it,
    edits it or blocks it (`decide`, as on a tool call; `pending_approvals` holds it)."""
    BUDGET = "budget"
    """The run spent its budget: `raise_budget` lets it go on."""
    MODEL = "model"
    """The model kept failing past `Timeouts.llm_ask_after`: `retry`, a reply (retried
    with it added) or `set_model` and `retry` let it go on; `error` says what failed."""
    AGENT = "agent"
    """A sub-agent this run delegated to waits for a person (`waiting_on` names it):
    answering that run lets this one go on."""
    PAUSED = "paused"
    """A person paused the run (`paused_by` names them): a reply lets it go on."""
    SLOT = "slot"
    """Queued: its owner has `max_concurrent_runs` runs open (`[limits]`); it makes its
    first model call once one of them ends. `error` (`TOO_MANY_RUNS`) says how many."""
    AUTH = "auth"
    """A tool call needs a person's grant to an MCP server (or an OAuth provider a tool
    uses) they have not given, or that stopped working (`auth_needed` names the server
    and the person): their connect link lets the call run."""
    REMOTE = "remote"
    """A remote A2A agent this run delegated to asks a question (`question` holds it,
    `waiting_on` names the call): a reply to this run is its answer, sent to that agent."""


DECIDED_WAITS = frozenset({WaitingFor.APPROVAL, WaitingFor.GUARDRAIL})
"""The waits a decision on `RunState.pending_approvals` ends (`decide`): a tool call's,
and a text a guardrail holds."""


class Need(StrEnum):
    """What a request does to a run, and so who may send it (`tarry.api.rights` checks
    it at every door; `tarry.contracts.waits` names it for what ends each wait)."""

    READ = "read"
    WRITE = "write"
    """Its writers: its owner, an admin, or a `write` share."""
    DECIDE = "decide"
    """A decision: a writer's, or an approver's on a call they approve."""


class NotifyEvent(StrEnum):
    """A stop point a `[[notify]]` entry of the worker's config may be told of."""

    WAITING_FOR_INPUT = "waiting_for_input"
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    WAITING_FOR_BUDGET = "waiting_for_budget"
    WAITING_FOR_AUTH = "waiting_for_auth"
    """A tool call waits for a person to connect their account (`waiting_for: auth`)."""
    ENDED = "ended"
    """Completed or failed."""


class ApprovalDefault(StrEnum):
    """What happens to a gated call nobody decided on before its deadline."""

    REJECT = "reject"
    APPROVE = "approve"


class Share(StrEnum):
    """What `RunInput.share` grants a user or group on a run (`tarry.core.ownership`)."""

    READ = "read"
    """Find it, read its state, transcript and events."""
    WRITE = "write"
    """Read it, and reply, pause, stop, resume, retry, raise its budget, switch its model
    or reply policy, and fork it."""


class ReplyPolicy(StrEnum):
    """What a reply does that arrives while the agent works (the run is `Running`); a
    run that waits takes every reply at once, whatever its policy."""

    QUEUE = "queue"
    """It waits for the next turn boundary: the model or tool call in flight ends first."""
    INTERRUPT = "interrupt"
    """The model call in flight is cancelled, the words it had written are kept marked
    `interrupted`, and the model is asked again at once with the reply. A running tool
    call ends first: its effects may be half done otherwise."""
    REJECT = "reject"
    """It is refused with `RUN_BUSY` and enters nothing: send it again once the run waits."""


class Mode(StrEnum):
    """What an answer without tool calls means: wait for the user, or the task is done."""

    CHAT = "chat"
    """An answer without tool calls waits for the user."""
    TASK = "task"
    """An answer without tool calls completes the run."""


class ErrorCode(StrEnum):
    """Structured codes carried by errors, warnings and failed tool results."""

    LLM_AUTH_FAILED = "LLM_AUTH_FAILED"
    """The provider refused the key (401/403): not retried; the run fails naming the profile,
    and `tarry resume` goes on once the key is fixed."""
    LLM_RATE_LIMITED = "LLM_RATE_LIMITED"
    """The provider said 429: retried, waiting `Retry-After` when it gives one."""
    LLM_TIMEOUT = "LLM_TIMEOUT"
    """A model call took longer than its profile's `request_timeout`: retried."""
    LLM_HTTP_ERROR = "LLM_HTTP_ERROR"
    """A connection error, 408, 409 or 5xx (retried for `timeouts.llm_retry_window`), or
    another 4xx (not retried)."""
    LLM_BAD_RESPONSE = "LLM_BAD_RESPONSE"
    """A 2xx answer that is not JSON or has no message: asked again up to
    `bad_response_attempts` times, then the run fails."""
    LLM_UNKNOWN_PROFILE = "LLM_UNKNOWN_PROFILE"
    """The run names a model profile no worker has; the message lists the profiles there are."""
    LLM_TRUNCATED = "LLM_TRUNCATED"
    """A warning: the answer hit the model's length limit and is kept as it is."""
    LLM_CONTEXT_MISSING = "LLM_CONTEXT_MISSING"
    """The worker cannot read the stored conversation: that call sends the whole conversation
    once."""
    LLM_PROVIDER_DOWN = "LLM_PROVIDER_DOWN"
    """A profile with a `fallback` whose provider keeps failing on the worker (its circuit
    is open): not retried; the run asks the next profile of the fallback that turn."""
    TOOL_INVALID_ARGUMENTS = "TOOL_INVALID_ARGUMENTS"
    """A tool call's arguments are not JSON or do not fit its schema: the model reads it and
    may try again."""
    TOOL_NOT_FOUND = "TOOL_NOT_FOUND"
    """A tool the run does not have; at start, a name in `tools` or `require_approval` no
    worker has, or one in `agents` no worker's config file has, which refuses the run."""
    TOOL_FAILED = "TOOL_FAILED"
    """The tool raised: the model reads the error."""
    TOOL_TIMEOUT = "TOOL_TIMEOUT"
    """The tool ran past `timeouts.tool` on every attempt."""
    TOOL_FORBIDDEN = "TOOL_FORBIDDEN"
    """A path that leaves the run's workspace."""
    TOOL_REJECTED = "TOOL_REJECTED"
    """A person (or a stop) rejected a gated call: the model reads the reason."""
    GUARDRAIL_BLOCKED = "GUARDRAIL_BLOCKED"
    """A guardrail withheld a tool's result: the model reads its name and reason."""
    GUARDRAIL_UNAVAILABLE = "GUARDRAIL_UNAVAILABLE"
    """A guardrail's check cannot run on this worker (a `pii` check without the
    `guardrails` extra): the guardrail blocks, unless it is `fail_open`."""
    TOOL_APPROVAL_EXPIRED = "TOOL_APPROVAL_EXPIRED"
    """Nobody decided on a gated call before its deadline, and its default is to reject."""
    TOOL_OUTCOME_UNKNOWN = "TOOL_OUTCOME_UNKNOWN"
    """A non-idempotent tool's single attempt was cut short: it may or may not have taken
    effect."""
    AGENT_FAILED = "AGENT_FAILED"
    """A sub-agent's run (`agent__NAME`) failed or was stopped: its tool result, which the
    delegating run's model reads; the message says why."""
    FORK_POINT_INVALID = "FORK_POINT_INVALID"
    """A fork `at` a message that is not one of the run's user messages: the error lists
    the positions of those."""
    PIN_UNKNOWN_MESSAGE = "PIN_UNKNOWN_MESSAGE"
    """A pin of a message the run does not have (past its last), or an unpin of one it has
    not pinned: nothing changes; the run's `message_count` and `pinned` say what there is."""
    PIN_INVALID = "PIN_INVALID"
    """A pin of a message a model cannot be sent alone: a tool's result, or a message with
    no text (an answer that only calls tools). Pin the answer that reads the result."""
    PINS_OVER_BUDGET = "PINS_OVER_BUDGET"
    """A pin that would make the run's pinned messages alone more than its model profile's
    context budget: nothing is pinned; unpin another, or pin a shorter message."""
    RETRY_NOT_WAITING = "RETRY_NOT_WAITING"
    """A `retry` of a run that is not waiting for its model: reply to it instead."""
    APPROVAL_NOTHING_PENDING = "APPROVAL_NOTHING_PENDING"
    """A decision on a run with no gated call waiting."""
    APPROVAL_UNKNOWN_CALL = "APPROVAL_UNKNOWN_CALL"
    """A decision naming a call the run is not waiting on."""
    APPROVAL_ALREADY_DECIDED = "APPROVAL_ALREADY_DECIDED"
    """A second decision on a call: the first one stands."""
    APPROVAL_INVALID_ARGUMENTS = "APPROVAL_INVALID_ARGUMENTS"
    """Edited arguments that do not fit the tool's schema."""
    APPROVAL_NOT_ALLOWED = "APPROVAL_NOT_ALLOWED"
    """A decision by someone who is not one of the call's approvers (`RunInput.approvers`):
    nothing is decided."""
    NOT_ALLOWED = "NOT_ALLOWED"
    """A change to a run the caller may read but not change (`tarry.core.ownership`): shared
    with them to `read` only. Nothing changes."""
    ENGINE_ABORTED = "ENGINE_ABORTED"
    """`stop` while the run was working: the run fails, its transcript kept."""
    ENGINE_MAX_TURNS = "ENGINE_MAX_TURNS"
    """A warning: `max_turns` model calls since the last reply; the run waits for the user."""
    ENGINE_LOOP_DETECTED = "ENGINE_LOOP_DETECTED"
    """A warning: the same failing call `max_repeated_failures` times; the run waits for the
    user."""
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """A warning: the run has spent its budget and waits (`waiting_for: budget`) until it is
    raised."""
    BUDGET_INVALID = "BUDGET_INVALID"
    """`raise_budget` with no limit, or one not above what the run has spent: nothing changes."""
    BUDGET_NOT_ALLOWED = "BUDGET_NOT_ALLOWED"
    """A start asking for a budget over the caller's `max_run_budget` (`[limits]`):
    nothing starts; ask for less, or for none (the run then has the most)."""
    SPEND_CAP_REACHED = "SPEND_CAP_REACHED"
    """The run's next model call would take its owner past their daily cap (`[limits]
    max_cost_usd_per_day`, `max_tokens_per_day`): it waits (`waiting_for: budget`),
    without calling, until an admin raises the cap or the day ends; the message names
    whose cap it is."""
    TOO_MANY_RUNS = "TOO_MANY_RUNS"
    """A start past its owner's `max_concurrent_runs` (`[limits]`), under
    `at_max_concurrent_runs = "refuse"`: nothing starts (429; start it again once one of
    their runs ends). Under `queue`, a queued run's `error` while it waits for a slot."""
    MODEL_NOT_ALLOWED = "MODEL_NOT_ALLOWED"
    """A start, a schedule, a fork, an eval, a sub-agent or a `set_model` naming a model
    profile outside the caller's `models` (`[limits]`): nothing starts or changes. A run
    that names no profile uses `default`, which counts too."""
    OUTPUT_INVALID = "OUTPUT_INVALID"
    """A task run's final answer does not fit `output_schema`, again after one repair: the run
    fails."""
    INPUT_EMPTY = "INPUT_EMPTY"
    """An empty reply: refused before it enters history."""
    INPUT_TOO_LARGE = "INPUT_TOO_LARGE"
    """A reply over 4 MiB (or a request body over the API's limit): refused whole."""
    INPUT_INVALID = "INPUT_INVALID"
    """Input of the wrong shape: text that is not valid UTF-8, a field the API does not take."""
    RUN_ENDED = "RUN_ENDED"
    """The run has ended: reply refused (`tarry resume` goes on with it)."""
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    """No run has that id."""
    RUN_BUSY = "RUN_BUSY"
    """A reply while the agent works, to a run whose `on_reply_while_running` is `reject`:
    nothing entered the run; send it again once the run waits."""
    AUTH_REQUIRED = "AUTH_REQUIRED"
    """A tool of an MCP server with `auth = "oauth"` needs a person's grant they have not
    given (or whose refresh failed, or that was revoked): the run waits for them to connect
    (`waiting_for: auth`, with a connect link) rather than fail."""
    CONNECT_REFUSED = "CONNECT_REFUSED"
    """A connect link or OAuth callback that cannot be used: another person's, a state
    unknown, used already or expired, or a run that no longer waits for that grant."""
    CONNECTION_NOT_FOUND = "CONNECTION_NOT_FOUND"
    """A revoke of a connection the person does not have: `tarry connections` lists theirs."""
    CONNECTIONS_UNAVAILABLE = "CONNECTIONS_UNAVAILABLE"
    """The deployment keeps no connections store (`TARRY_CONNECTIONS_KEY` unset): set it,
    the same for the workers and the API."""
    SEARCH_UNAVAILABLE = "SEARCH_UNAVAILABLE"
    """A search where the deployment keeps no search index (`TARRY_SEARCH_INDEX` unset), or
    its index cannot be opened: set it for the workers and the API alike (`tarry dev` does)."""
    MEMORY_NOT_FOUND = "MEMORY_NOT_FOUND"
    """No memory has that id, or none the caller may see (their own scope's and their
    groups'; admins: all): `tarry memory list` shows those there are."""
    RUN_NOT_SERVED = "RUN_NOT_SERVED"
    """No worker polls the run's task queue, so it cannot answer: start `tarry worker` or
    `tarry dev`."""
    RUN_NOT_ENDED = "RUN_NOT_ENDED"
    """`resume` of a run that is still going: reply to it instead."""
    RUN_EXISTS = "RUN_EXISTS"
    """A start under the id of a run that exists, open or ended: nothing is started."""
    RUN_ID_INVALID = "RUN_ID_INVALID"
    """An id outside the rule: 1 to 200 letters, digits, `-`, `_`, `.`, `:` or `@`, not
    starting with a dot."""
    SCHEDULE_NOT_FOUND = "SCHEDULE_NOT_FOUND"
    """No schedule has that name: `tarry schedule list` shows the schedules there are."""
    SCHEDULE_EXISTS = "SCHEDULE_EXISTS"
    """A schedule of that name exists already: nothing is created."""
    SCHEDULE_INVALID = "SCHEDULE_INVALID"
    """A schedule Temporal cannot keep: a name outside the run id rule (or too long for its
    runs' ids), neither or both of `cron` and `every`, a cron expression, interval or time
    zone it cannot read."""
    DATASET_NOT_FOUND = "DATASET_NOT_FOUND"
    """No dataset (or no version of it) has that name, or none its caller may read:
    `tarry dataset list` shows the datasets there are."""
    DATASET_INVALID = "DATASET_INVALID"
    """A dataset name outside its rule (1 to 100 letters, digits, `_`, `.`, `-`), or a
    `--from` query it cannot read: an unknown key, a key twice, a value of the wrong kind."""
    DATASET_TOO_LARGE = "DATASET_TOO_LARGE"
    """A dataset version over its caps (`TARRY_DATASET_MAX_BYTES` stored bytes,
    `TARRY_DATASET_MAX_POINTS` points): nothing is written; narrow the query (`since=`,
    `tool=`, `limit=`) or raise the cap."""
    DATASET_TOO_MANY_VERSIONS = "DATASET_TOO_MANY_VERSIONS"
    """A dataset has `TARRY_DATASET_MAX_VERSIONS` versions already: nothing is written;
    create the next under a new name, or raise the cap."""
    IDEMPOTENCY_KEY_REUSED = "IDEMPOTENCY_KEY_REUSED"
    """An `Idempotency-Key` sent again with a different body: nothing is started."""
    TEMPORAL_UNAVAILABLE = "TEMPORAL_UNAVAILABLE"
    """Temporal did not answer in time, or refused the call (a busy or restarting server):
    nothing was changed that a retry could repeat; try again."""
    UNAUTHORIZED = "UNAUTHORIZED"
    """An API request without a valid token."""
    TOKEN_EXPIRED = "TOKEN_EXPIRED"
    """A JWT of the identity provider (`[api.oidc]`) past its `exp`: sign in again."""
    TOKEN_NOT_YET_VALID = "TOKEN_NOT_YET_VALID"
    """A JWT whose `nbf` (or `iat`) is still ahead, beyond the allowed clock skew."""
    TOKEN_WRONG_AUDIENCE = "TOKEN_WRONG_AUDIENCE"
    """A JWT made for another client or API than `[api.oidc] audience`."""
    TOKEN_WRONG_ISSUER = "TOKEN_WRONG_ISSUER"
    """A JWT from another issuer than `[api.oidc] issuer`."""
    TOKEN_UNKNOWN_KEY = "TOKEN_UNKNOWN_KEY"
    """A JWT signed by a key (`kid`) the identity provider does not publish, even after
    the keys were fetched again."""
    TOKEN_ALGORITHM_REFUSED = "TOKEN_ALGORITHM_REFUSED"
    """A JWT signed with an algorithm outside `[api.oidc] algorithms` (`none`, `HS256`)."""
    TOKEN_INVALID = "TOKEN_INVALID"
    """A bearer token that is no well-formed JWT, whose signature does not verify (an
    altered payload), or that lacks a claim (`exp`, the user)."""
    USER_NAME_REFUSED = "USER_NAME_REFUSED"
    """The identity provider's token or the sign-in gateway names a user by a name no
    person may have (`tarry.core.identities.name_problem`): a name Tarry gives to no person
    (`temporal-ui`, `cli:NAME`, `group:NAME`), a group's, one with invisible characters,
    or a long one. Map the user to a name (`[api.oidc.users]`), or rename them there."""
    USER_HEADER_REPEATED = "USER_HEADER_REPEATED"
    """The sign-in gateway's request names its user (`forwarded_user_header`) more than
    once: it is no one's. Have the gateway replace the header its clients send."""
    IDENTITY_PROVIDER_UNAVAILABLE = "IDENTITY_PROVIDER_UNAVAILABLE"
    """The identity provider's discovery document or keys could not be fetched, so no
    JWT can be checked; try again, or check `[api.oidc]`."""
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    """HTTP API: a user's request beyond their share of `[api.limits]`, more run starts
    in a minute than `starts_per_minute` or more event streams open than
    `streams_per_user`: 429 with `Retry-After`; try again then, or close a stream."""
    PAYLOAD_NOT_STORED = "PAYLOAD_NOT_STORED"
    """The payload store refused a payload (over its limit, or unusable)."""
    PAYLOAD_TOO_LARGE = "PAYLOAD_TOO_LARGE"
    """What a run would carry on is over the payload store's limit (or Temporal's 2 MB
    without a store), after its older messages went into pages: the run waits for a person
    instead of failing every workflow task. A reply goes on with it; a stop ends it."""
    RUN_TASK_FAILING = "RUN_TASK_FAILING"
    """The run's workflow task fails at every attempt (a worker that cannot decode its
    payloads, a bug): it cannot answer or move until a worker can complete its task. The
    message gives Temporal's reason."""
    PAYLOAD_MISSING = "PAYLOAD_MISSING"
    """The payload store lacks a stored page of a run's transcript (a client without the
    workers' storage directory or bucket), or holds it damaged."""
    ACTION_LINK_INVALID = "ACTION_LINK_INVALID"
    """An action link whose token was not signed with this API's action key (altered,
    or made for another deployment), or an API with no action key: nothing is decided."""
    A2A_PUSH_REFUSED = "A2A_PUSH_REFUSED"
    """A push notification to `/v1/a2a/push/...` without the token the worker gave that
    remote call (forged, or for another run or call), or to an API with no action key:
    the run is not told."""
    ACTION_LINK_EXPIRED = "ACTION_LINK_EXPIRED"
    """An action link used after its call's approval deadline (or the link's lifetime,
    `TARRY_ACTION_LINK_TTL`): nothing is decided."""
    NOTIFY_FAILED = "NOTIFY_FAILED"
    """A notification's receiver could not be reached or answered 5xx, 408 or 429:
    retried with backoff for a day; another 4xx is not retried."""
    UPDATE_FAILED = "UPDATE_FAILED"
    """An update failed in a way Tarry has no code for; its message is Temporal's."""
    EVAL_INVALID = "EVAL_INVALID"
    """An eval that cannot start (a dataset line that is no decision point, an empty
    dataset, a judge scorer without a judge) or a `compare` of two datasets."""
    EVAL_NOT_FOUND = "EVAL_NOT_FOUND"
    """No eval has that id."""


class ErrorInfo(BaseModel):
    code: ErrorCode
    message: str
    details: dict[str, Any] | None = None


TEMPORAL_UI = "temporal-ui"
"""Who a signal or update without `by` is recorded as: sent straight from the Temporal UI
(or the `temporal` CLI) by an operator, whom Temporal's own access control governs."""


def principal_problem(name: str) -> str | None:
    """Why `name` cannot name a user or `group:NAME` in a share; None when it can. The
    names go into visibility queries, so no quote or backslash (nor control character)."""
    bare = name.removeprefix("group:")
    if not bare.strip() or bare != bare.strip():
        return f"{name!r} is no user or group: give a name, or group:NAME"
    if any(c in "'\\\"" or not c.isprintable() for c in name):
        return f"{name!r}: a name has no quotes, backslashes or control characters"
    return None
