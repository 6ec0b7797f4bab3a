"""Every message a run writes goes into the search index (`tarry.search`), by the
`index_messages` activity, only on a worker with an index (`TARRY_SEARCH_INDEX`). With
an embedding profile the activity embeds them too, and answers what that used: it counts
in the run's usage (so against its budget) and, for a run with daily caps, on its
owner's ledger with the next model call's settlement (`workflows.spend`).

The run learns that with its tools (`Catalogue.search_index`), so a run on a worker
without one gives no command it gave before. It keeps how many of its messages it has
handed to the index (`Conversation.indexed`) and hands on the rest at two moments:
- as the model is asked (`INDEXING`, the first stage, before paging can move them out
  of memory): what the turn before wrote (its answer's tool calls and their results),
  with the replies it delivered;
- when the run stops to wait for a reply, and when it ends: the answer it stopped on.
The activity runs beside the run, which never waits for it but before a hand-over and
at its end (`settled`), so a turn takes no longer for it.
Every message not yet indexed is in memory then: the model's window, which paging keeps,
begins at the latest call, and every message since is newer.

The index names a message by its run and transcript index, which never change, and keeps
one row per name, so a retried activity, a replayed history or a worker killed halfway
indexes nothing twice; an index that cannot be reached for `GIVE_UP_AFTER` costs the run
nothing but those messages' place in it, which `tarry index rebuild` restores.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

from tarry.contracts import OWNER_ATTRIBUTE, READERS_ATTRIBUTE, WRITERS_ATTRIBUTE, Catalogue
from tarry.contracts.ledger import Spend
from tarry.contracts.search import (
    INDEX_ACTIVITY,
    IndexAnswer,
    IndexedMessage,
    IndexedRun,
    IndexRequest,
    agent_of,
    indexed_text,
)
from workflows.memory import RunMemory
from workflows.stage import AskModel, ModelOutcome, RunScope, Stage

ATTEMPT = timedelta(seconds=10)
"""Indexing a turn's messages takes milliseconds, and embedding them (an embedding
profile's) one short model call: past this its worker is taken for dead."""
GIVE_UP_AFTER = timedelta(minutes=10)
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1))


def learn(memory: RunMemory, catalogue: Catalogue) -> None:
    """Keeps whether the worker has a search index, from the run's catalogue."""
    memory.catalogue.search_index = catalogue.search_index


def _request(memory: RunMemory) -> IndexRequest | None:
    """The messages not yet handed to the index, marked handed; None: none."""
    c = memory.conversation
    if not memory.catalogue.search_index or c.indexed >= c.message_count:
        return None
    start = max(c.indexed, c.paged)
    now = workflow.now()
    messages = [
        IndexedMessage(index=index, role=message.role, text=text, at=now)
        for index, message in enumerate(c.messages_from(start), start)
        if (text := indexed_text(message))
    ]
    c.indexed = c.message_count
    if not messages:
        return None
    info = workflow.info()
    attributes = info.typed_search_attributes
    readers = {
        *(attributes.get(READERS_ATTRIBUTE) or ()),
        *(attributes.get(WRITERS_ATTRIBUTE) or ()),
    }
    run = IndexedRun(
        run_id=info.workflow_id,
        owner=attributes.get(OWNER_ATTRIBUTE),
        readers=sorted(readers),
        agent=agent_of(info.workflow_id),
    )
    return IndexRequest(run=run, messages=messages)


def index_soon(memory: RunMemory, pending: list[asyncio.Task[None]]) -> None:
    """Hands the index the messages written since it was last handed some, beside what
    the run does next: nothing the run does waits for the index, but a hand-over and the
    run's end (`settled`). `pending`: the run's requests in flight."""
    pending[:] = [task for task in pending if not task.done()]
    if (request := _request(memory)) is not None:
        pending.append(asyncio.create_task(_send(memory, request)))


async def settled(pending: list[asyncio.Task[None]]) -> None:
    """Once every request in flight is answered: before a hand-over, which would leave
    them behind, and before the run ends."""
    await asyncio.gather(*pending)
    pending.clear()


async def _send(memory: RunMemory, request: IndexRequest) -> None:
    """Indexes `request`; what embedding it used counts against the run's budget."""
    try:
        answer = await workflow.execute_activity(
            INDEX_ACTIVITY,
            request,
            result_type=IndexAnswer,
            start_to_close_timeout=ATTEMPT,
            schedule_to_close_timeout=GIVE_UP_AFTER,
            retry_policy=_RETRY,
            summary=f"index messages {request.messages[0].index}-{request.messages[-1].index}",
        )
    except ActivityError as e:
        workflow.logger.warning(
            "messages not indexed (%s); `tarry index rebuild` indexes them", e.cause or e
        )
        return
    if (usage := answer.usage) is not None:
        memory.conversation.usage += usage
        if (mark := memory.spend) is not None:  # a capped run's: its next call settles it
            spent = Spend(tokens=usage.total_tokens, cost_usd=usage.cost_usd)
            mark.unsettled = spent if mark.unsettled is None else mark.unsettled + spent


class Indexing(Stage):
    """Indexes what the turn before wrote while the model answers."""

    async def around_model(self, run: RunScope, ask: AskModel) -> ModelOutcome:
        # Taken before the call: paging, inside it, may move older messages out. Replies
        # alone wait for the answer's request (the model's window keeps them): a chat's
        # turn makes one request, not two.
        c = run.memory.conversation
        if any(m.role != "user" for m in c.messages_from(max(c.indexed, c.paged))):
            index_soon(run.memory, run.phases.indexing)
        return await ask()


INDEXING = Indexing()
