"""The HTTP API keeps the promises of its own OpenAPI document: schemathesis, with every
check it has, against the API served over a real dev server and worker, with a token.

The two event streams (`/v1/runs/{id}/events`, `/v1/agui`) never end by themselves, so a
fuzzer's request would hang on them: they are left out of the run and tested by hand in
tests/test_http_api_events.py and tests/test_agui.py."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.conftest import Agent
from tests.http_api import serving

TOKEN = "contract-token-5be1-0123456789"

CONFIG = """\
# Two answers no schema can foresee, so schema-valid data may meet them: a cursor is
# opaque (one this API did not give is 422 INPUT_INVALID), and an Idempotency-Key the
# fuzzer sends again with another body is 422 IDEMPOTENCY_KEY_REUSED.
[[operations]]
include-path = "/v1/runs"
checks.positive_data_acceptance.expected-statuses = [
    "2xx", "3xx", "401", "403", "404", "409", "422", "429", "5xx"
]
"""


@pytest.mark.timeout(300)
async def test_schemathesis_finds_nothing_the_openapi_document_does_not_promise(
    agent: Agent, tmp_path: Path
) -> None:
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    async with serving(agent, TOKEN) as api:
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
        fuzzer = await asyncio.create_subprocess_exec(
            *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        output, _ = await fuzzer.communicate()
    report = output.decode(errors="replace")
    assert fuzzer.returncode == 0, report
    for phase in ("Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in report, report
