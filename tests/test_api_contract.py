"""The HTTP API keeps the promises of its own OpenAPI document: schemathesis, with every
check it has, against the API served over a real dev server and worker, with named users
(`alice`, whose token the fuzzer sends, and `bob`).

The two event streams (`/v1/runs/{id}/events`, `/v1/agui`) never end by themselves, so a
fuzzer's request would hang on them: they are left out of the run and tested by hand in
tests/test_http_api_events.py and tests/test_agui.py."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.converter import DataConverter

from tarry.testing import start_dev_server
from tests.conftest import Agent
from tests.deadline import deadline
from tests.http_api import serving

TOKEN = "contract-token-5be1-0123456789"
USERS = (f"alice:{TOKEN}", "bob:contract-token-of-bob-9876543210")

CONFIG = """\
# Two answers no schema can foresee, so schema-valid data may meet them: a cursor is
# opaque (one this API did not give is 422 INPUT_INVALID), and an Idempotency-Key the
# fuzzer sends again with another body is 422 IDEMPOTENCY_KEY_REUSED.
[[operations]]
include-path = "/v1/runs"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"
]

# A first message's `input` goes with `?start=true` only, a rule across the query and
# the body that no schema states: `input` without it is 422 INPUT_INVALID.
[[operations]]
include-path = "/v1/runs/{run_id}/messages"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"
]

# A cron expression and a time zone are text only Temporal can read: schema-valid ones
# it cannot are 422 SCHEDULE_INVALID.
[[operations]]
include-path = "/v1/schedules"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"
]

# A dataset's query is text only its parser reads: schema-valid ones it cannot are 422
# DATASET_INVALID.
[[operations]]
include-path = "/v1/datasets"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"
]
"""


@pytest.fixture
async def own_temporal(converter: DataConverter) -> AsyncIterator[Client]:
    """A server of the test's own: the fuzzer lists the runs there are and asks each one,
    and the session's server holds other tests' runs, whose workers are gone (503). The
    test asks for it before `agent_factory`, so that it stops after the agent's worker."""
    env = await start_dev_server(converter)
    yield env.client
    await env.shutdown()


# Two minutes on a quiet machine; the whole suite under load (2 cores, load ~5) triples it.
@pytest.mark.timeout(deadline(900))
async def test_schemathesis_finds_nothing_the_openapi_document_does_not_promise(
    own_temporal: Client, agent_factory: Any, tmp_path: Path
) -> None:
    agent: Agent = await agent_factory(client=own_temporal)
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    async with serving(agent, *USERS) as api:
        command = [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(config),
            "run",
            f"{api.url}/openapi.json",
            "--checks",
            "all",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--exclude-path-regex",
            "/events$|^/v1/agui$",
            # Bounded and the same every time: a failure here is a failure again.
            "--max-examples",
            "10",
            "--seed",
            "1",
            "--workers",
            "1",
            "--request-timeout",
            "60",
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path / "report"),
        ]
        # In the test's own directory: schemathesis keeps the failures it found in
        # `.schemathesis/` there and replays them first on its next run.
        fuzzer = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=tmp_path
        )
        output, _ = await fuzzer.communicate()
    report = output.decode(errors="replace")
    assert fuzzer.returncode == 0, report
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in report, report
