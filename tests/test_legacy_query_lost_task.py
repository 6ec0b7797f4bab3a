"""The legacy-query eviction (`workers.legacy_query`) when the query's history holds a
workflow task the server started but no worker got, as a server restart can lose one:
seen in `tests/test_server_restart.py` and `tests/test_soak.py` under load, where the
reply that came next was taken in behind the query's leftover commands (`TMPRL1100` on
replay). The task's started event gives the run's activations a new timestamp, as a task
the worker did get would; only the server knows the task is still pending."""

from __future__ import annotations

from functools import partial

from temporalio.client import Client
from temporalio.worker import Replayer

from tests.faults import until_the_scene_happens
from tests.sdk_legacy_query_repro import Conversation, reply_after_a_query_past_a_lost_task
from workers.legacy_query import install


async def test_a_reply_after_a_query_past_a_task_no_worker_got_leaves_a_history_that_replays(
    temporal: Client,
) -> None:
    client = await Client.connect(temporal.service_client.config.target_host)  # its own converter
    handle = await until_the_scene_happens(
        partial(reply_after_a_query_past_a_lost_task, client, install),
        "the query reaching B past the lost task",
    )

    history = await handle.fetch_history()
    await Replayer(workflows=[Conversation]).replay_workflow(history)
