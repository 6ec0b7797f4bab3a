"""`TarryPlugin` as the SDK's plugins are used: on a client, on a worker, on a replayer."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from tarry.client import Tarry
from tarry.config.settings import ModelProfile, TarrySettings
from tarry.contracts import Phase, RunInput
from tarry.temporal.codec import EncryptionCodec, new_key
from tarry.testing.scripted_model import ScriptedModel, say
from tests.conftest import FAST_TIMEOUTS
from tests.deadline import TIMEOUT
from workers.plugin import TarryPlugin


def settings_in(tmp_path: Path, **values: Any) -> TarrySettings:
    return TarrySettings.model_construct(
        tarry_workspace_root=tmp_path / "workspaces",
        tarry_storage_dir=tmp_path / "payloads",
        **values,
    )


async def test_a_client_connected_with_the_plugin_serves_runs_from_a_bare_worker(
    temporal: Client, tmp_path: Path
) -> None:
    async with ScriptedModel([say("Hello.")]) as model:
        profile = ModelProfile(base_url=model.base_url, model="scripted")
        settings = settings_in(tmp_path, tarry_encryption_key=SecretStr(new_key()))
        plugin = TarryPlugin(settings, profiles={"default": profile})
        address = temporal.service_client.config.target_host
        client = await Client.connect(address, plugins=[plugin])
        queue = f"plugin-{uuid.uuid4().hex[:8]}"

        async with Worker(client, task_queue=queue):  # the client hands the plugin on
            run = await Tarry(client, queue).start(RunInput(prompt="hi", timeouts=FAST_TIMEOUTS))
            state = await run.wait_for({Phase.WAITING_USER}, TIMEOUT)
            history = await client.get_workflow_handle(run.id).fetch_history()
            replayed = await Replayer(workflows=[], plugins=[plugin]).replay_workflow(history)
        await plugin.aclose()

    assert state.last_assistant_text == "Hello."
    # The client took the plugin's converter: the run's payloads are encrypted.
    assert isinstance(client.data_converter.payload_codec, EncryptionCodec)
    encodings = {
        p.metadata["encoding"]
        for p in history.events[0].workflow_execution_started_event_attributes.input.payloads
    }
    assert encodings == {b"binary/encrypted"}
    assert replayed.replay_failure is None


async def test_a_worker_takes_its_cache_pollers_and_sticky_timeout_from_the_settings(
    temporal: Client, tmp_path: Path
) -> None:
    settings = settings_in(
        tmp_path,
        tarry_workflow_cache=7,
        tarry_workflow_task_pollers=3,
        tarry_sticky_timeout=1.5,
    )
    plugin = TarryPlugin(settings)

    worker = Worker(
        temporal,
        task_queue=f"never-run-{uuid.uuid4().hex[:8]}",
        max_cached_workflows=1000,
        plugins=[plugin],
    )

    config = worker.config(active_config=True)
    assert config["max_cached_workflows"] == 7
    assert config["max_concurrent_workflow_task_polls"] == 3
    assert config["sticky_queue_schedule_to_start_timeout"] == timedelta(seconds=1.5)
    await plugin.aclose()
