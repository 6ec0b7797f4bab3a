"""The compatibility ledger: every patch id the workflows ask for, and every shim kept for
the histories, builds and clients of earlier code, each with the day it came and the day
it goes.

Compatibility left without a date stays for good, and each branch of it is one more
thing every later change must keep working. Here each has a date: `tests/test_compatibility.py`
fails once one has passed, so its step is taken (or the date moved, with the reason in
`why`) instead of forgotten. The upgrading guide's tables are generated from this ledger
(`python docs/upgrading_tables.py`), and the workflows ask for a patch by its entry here
(`workflow.patched(COST_ATTRIBUTE.id)`), so no id is asked for without one.

Pure data, imported by workflow code: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

__all__ = [
    "ASK_ON_MODEL_FAILURE",
    "AUDIT_HAND_OVER",
    "CALL_PREVIEWS",
    "CATALOGUE_AT_START",
    "COST_ATTRIBUTE",
    "HAND_OVER",
    "NOTIFICATIONS",
    "PAGES",
    "PAGE_BEFORE_HAND_OVER",
    "PAGE_INDEX",
    "PATCHES",
    "RE2_RULES",
    "REPLY_IDS_WINDOW",
    "RULES_TEXT_LIMIT",
    "SHIMS",
    "SIZED_PAGES",
    "SUB_AGENT_OWNER",
    "TITLE_FROM_FIRST_MESSAGE",
    "UNIQUE_CALL_IDS",
    "WINDOW",
    "Patch",
    "Shim",
]

WINDOW = timedelta(days=30)
"""How long an unversioned deployment's run replays on new code after the change that
replaced its code landed (docs/guides/upgrading.md): a patch's old branch is kept this
long, then its `deprecate_patch` call as long again; a shim is kept this long."""


@dataclass(frozen=True)
class Patch:
    """A `workflow.patched` id: runs recorded without its marker take the old branch."""

    id: str
    guards: str
    """What the new branch does, that runs recorded before it did not."""
    since: date
    """The day it landed on `main` (`git log -S '"<id>"' -- workflows`)."""
    retire: date
    """The day its next step is due: `patched` becomes `deprecate_patch` (its old branch
    deleted, with the recorded histories that took it); once `deprecated`, the call is
    deleted, with this entry. By the rule, `since` plus `WINDOW`, and as much again once
    `deprecated`."""
    deprecated: bool = False
    """Asked for with `workflow.deprecate_patch`: the old branch is gone already."""
    why: str = ""
    """Why `retire` is not the rule's date."""

    @property
    def deleted(self) -> date:
        """The day the call goes for good."""
        return self.retire if self.deprecated else self.retire + WINDOW

    @property
    def on_schedule(self) -> bool:
        """Whether `retire` is the rule's date."""
        return self.retire == self.since + (2 * WINDOW if self.deprecated else WINDOW)


@dataclass(frozen=True)
class Shim:
    """Code that keeps an earlier shape working: of a run's memory, a request, a client."""

    name: str
    keeps: str
    """What it keeps working, and for whom."""
    where: tuple[str, ...]
    """Its code, as `path: text found there`, for the one who removes it."""
    since: date
    """The day the shape it stands in for was replaced on `main`."""
    retire: date
    """The day it goes, with this entry. By the rule, `since` plus `WINDOW`."""
    why: str = ""
    """Why `retire` is not the rule's date."""

    @property
    def on_schedule(self) -> bool:
        """Whether `retire` is the rule's date."""
        return self.retire == self.since + WINDOW


HAND_OVER = Patch(
    "continue-as-new",
    "A run hands over to a fresh run of its chain (continue-as-new with its memory) every "
    "`continue_as_new_after_turns` turns; before, a run kept one history for good.",
    since=date(2026, 11, 23),
    retire=date(2026, 12, 27),
    deprecated=True,
    why="Every supported history that reaches a hand-over has its marker, and the old branch "
    "(keep the history) is deleted. The call goes when the histories recorded with the marker "
    "leave the window.",
)
CATALOGUE_AT_START = Patch(
    "tool-catalogue-at-start",
    "A run resolves its tools (the catalogue activity) before anything else, and a run naming "
    "a tool no worker has fails at once (`TOOL_NOT_FOUND`).",
    since=date(2026, 11, 25),
    retire=date(2026, 12, 27),
    deprecated=True,
    why="Every supported history resolved its tools at its start, and the branch without it "
    "is deleted. The call goes with `continue-as-new`'s.",
)
COST_ATTRIBUTE = Patch(
    "cost-attribute",
    "The run's search attributes include `TarryCostUsd`.",
    since=date(2026, 11, 25),
    retire=date(2026, 12, 25),
)
ASK_ON_MODEL_FAILURE = Patch(
    "ask-on-model-failure",
    "A model failing past `timeouts.llm_ask_after` hands the run to a person (`WaitingUser`, "
    "waiting for `model`) instead of retrying for the whole `llm_retry_window` and failing.",
    since=date(2026, 11, 25),
    retire=date(2026, 12, 25),
)
PAGES = Patch(
    "transcript-pages",
    "On a segment's last turn, the messages before the model's window move to immutable pages "
    "of the payload store, and the hand-over carries their references.",
    since=date(2026, 11, 26),
    retire=date(2026, 12, 26),
)
NOTIFICATIONS = Patch(
    "notifications",
    "A run with `[[notify]]` entries sends a notification at each stop point and waits for it "
    "before it hands over or closes.",
    since=date(2026, 11, 26),
    retire=date(2026, 12, 26),
)
REPLY_IDS_WINDOW = Patch(
    "reply-ids-window",
    "A run keeps the ids of its latest 100 replies (to know a retried reply), not every one.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
RE2_RULES = Patch(
    "approval-rules-re2",
    "Approval rules' regular expressions are matched with RE2, in linear time.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
SIZED_PAGES = Patch(
    "transcript-pages-by-size",
    "Pages are cut by size (512 KiB of messages) and written on any turn that needs them, not "
    "only the turn before a hand-over.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
PAGE_BEFORE_HAND_OVER = Patch(
    "page-before-hand-over",
    "A hand-over over 1 MiB pages out first, and one over the payload limit waits with "
    "`PAYLOAD_TOO_LARGE` instead of freezing the run.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
PAGE_INDEX = Patch(
    "transcript-page-index",
    "A run keeps its newest 64-127 page references and an index of the older ones, not every "
    "reference.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
TITLE_FROM_FIRST_MESSAGE = Patch(
    "summary-from-first-message",
    "A run started without a prompt takes its summary from its first message.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
SUB_AGENT_OWNER = Patch(
    "sub-agent-owner",
    "A sub-agent starts with its lead's owner, readers and writers as search attributes.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
UNIQUE_CALL_IDS = Patch(
    "unique-call-ids",
    "A tool-call id the model repeats within a run is renamed (`ID-N`), so each gated call can "
    "be decided by its id.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
AUDIT_HAND_OVER = Patch(
    "audit-hand-over",
    "A segment holding 200 audit records hands over at its next safe point, so the trail in "
    "memory stays bounded.",
    since=date(2026, 11, 27),
    retire=date(2026, 12, 27),
)
PAUSED_WAIT = Patch(
    "paused-wait",
    "A run a person paused records that it waits for `paused` (its search attribute, its "
    "report to a parent run), not `input`.",
    since=date(2026, 12, 6),
    retire=date(2027, 1, 5),
)
RULES_TEXT_LIMIT = Patch(
    "approval-rules-text-limit",
    "Approval rules' regular expressions search values of up to 16,384 characters (1,048,576 "
    "before); a longer one counts against the call.",
    since=date(2026, 12, 6),
    retire=date(2027, 1, 5),
)
CALL_PREVIEWS = Patch(
    "call-previews",
    "A run gating tool calls asks the `preview_calls` activity what a person will see of them "
    "(a diff, the arguments), and records it with the pending calls, before it waits.",
    since=date(2026, 12, 6),
    retire=date(2027, 1, 5),
)

PATCHES = (
    HAND_OVER,
    CATALOGUE_AT_START,
    COST_ATTRIBUTE,
    ASK_ON_MODEL_FAILURE,
    PAGES,
    NOTIFICATIONS,
    REPLY_IDS_WINDOW,
    RE2_RULES,
    SIZED_PAGES,
    PAGE_BEFORE_HAND_OVER,
    PAGE_INDEX,
    TITLE_FROM_FIRST_MESSAGE,
    SUB_AGENT_OWNER,
    UNIQUE_CALL_IDS,
    AUDIT_HAND_OVER,
    RULES_TEXT_LIMIT,
    PAUSED_WAIT,
    CALL_PREVIEWS,
)
"""Every id the workflows ask for, in the order they landed."""

SHIMS = (
    Shim(
        "pre-catalogue-model-call",
        "A model request that names its tools (`LlmRequest.tools`, `require_approval`) instead "
        "of carrying their definitions is answered with the tools the model activity resolves, "
        "and the answer says which it offered (`LlmResponse.offered_tools`, `gated_tools`, "
        "`non_idempotent_tools`): the requests of workflows from before the workflow owned its "
        "tool catalogue.",
        where=(
            "activities/model_calls.py: if tools is None:",
            "tarry/contracts/activities.py: Before the catalogue only: the tools to offer",
            "tarry/contracts/activities.py: Before the catalogue only: the run's gated tools",
            "tarry/contracts/activities.py: offered_tools: list[str]",
            "tarry/contracts/activities.py: gated_tools: dict[str, dict[str, Any]]",
            "tarry/contracts/activities.py: non_idempotent_tools: list[str]",
        ),
        since=date(2026, 11, 24),
        retire=date(2026, 12, 25),
        why="A day past the rule's, to go with the first deprecations: no supported build "
        "sends such a request (none runs code older than 2026-11-25).",
    ),
    Shim(
        "catalogue-as-a-list",
        "A catalogue request without a model profile (from a workflow before `Catalogue`) is "
        "answered with the bare list of tools.",
        where=(
            "activities/tool_calls.py: catalogue.tools if request.profile is None",
            "tarry/contracts/activities.py: from before `Catalogue`): the answer is the bare list",
        ),
        since=date(2026, 11, 25),
        retire=date(2026, 12, 25),
    ),
    Shim(
        "flat-memory-write",
        "A hand-over, and `tarry resume`'s input, is written in the flat shape the builds "
        "before the grouped `RunMemory` read, so that a worker of such a build (a rolling "
        "deploy, a rollback) can go on with it.",
        where=(
            "workflows/memory.py: def _flat(",
            "workflows/memory.py: _WRITTEN_FLAT",
            "workflows/memory.py: _WRITTEN_AT",
        ),
        since=date(2026, 11, 27),
        retire=date(2026, 12, 27),
    ),
    Shim(
        "flat-memory-read",
        "A memory handed over flat (by the builds before the grouped `RunMemory`, the ones "
        "before the catalogue among them, and by today's until `flat-memory-write` goes) loads "
        "into its groups.",
        where=(
            "workflows/memory.py: def _lift_flat_fields(",
            "workflows/memory.py: _RENAMED",
            "workflows/memory.py: _GROUP_OF",
        ),
        since=date(2026, 11, 24),
        retire=date(2027, 1, 26),
        why="Hand-overs are written flat until `flat-memory-write` goes on 2026-12-27, and the "
        "runs handed one replay for the window after that.",
    ),
    Shim(
        "old-client-arguments",
        "Clients from before the audit trail: `set_model` with a profile's name alone, "
        "`set_reply_policy` with the policy alone, and a link's decision naming its door as "
        "`source`.",
        where=(
            "workflows/audit.py: ModelArg = ModelSwitch | str",
            "workflows/audit.py: PolicyArg = ReplyPolicyChange | ReplyPolicy",
            "workflows/audit.py: decision.source == Door.LINK",
        ),
        since=date(2026, 11, 27),
        retire=date(2026, 12, 27),
    ),
    Shim(
        "started-update",
        "The `started` update, which clients from before the catalogue check ask after a start "
        "to learn that the run has its tools (or `TOOL_NOT_FOUND`). Recorded histories that "
        "called it go with it.",
        where=("workflows/agent_run.py: async def started(",),
        since=date(2026, 11, 27),
        retire=date(2026, 12, 27),
    ),
    Shim(
        "catalogue-check-for-older-workers",
        "A worker from before `checked_catalogue` is asked its `catalogue_check` instead, at "
        "once: the start is checked all the same, and its run resolves its own tools.",
        where=(
            "tarry/client/starting.py: if not _not_registered(e):",
            "tarry/client/starting.py: NOT_REGISTERED = ",
        ),
        since=date(2026, 12, 7),
        retire=date(2027, 1, 6),
    ),
)
"""Every shim, in the order its shape was replaced."""
