"""Strict JSON output: a task run's final answer must fit `RunInput.output_schema`.

The model is asked for it (the model activity sends the schema as the provider's
structured output), and the workflow checks what came back: a provider without
structured output, or one that strays from it, still cannot end the run with an answer
that does not fit. A miss is shown to the model once, as a user message with the
validation errors; a second miss fails the run `OUTPUT_INVALID`. jsonschema is pure
Python without I/O: deterministic.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from tarry.contracts import ChatMessage, ErrorCode, ErrorInfo
from workflows.memory import RunMemory

REPAIRS = 1
"""Answers that miss the schema and are shown their errors before the run fails."""
_ERRORS_SHOWN = 10


def problems(text: str | None, schema: dict[str, Any]) -> list[str]:
    """Why `text` is not JSON that fits `schema`; empty when it is."""
    try:
        value = json.loads(text or "")
    except ValueError as e:
        return [f"the answer is not JSON: {e}"]
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    return [f"at {e.json_path}: {e.message}" for e in errors[:_ERRORS_SHOWN]]


def finish(memory: RunMemory, schema: dict[str, Any] | None) -> ErrorInfo | bool:
    """For a task run's final answer: True when it fits (or there is no schema) and is
    now the run's output; False when the model is asked again, its errors now the
    transcript's last message; the `OUTPUT_INVALID` error that fails the run when it
    missed again."""
    m = memory
    if schema is None or not (found := problems(m.conversation.last_assistant_text, schema)):
        m.conversation.output = m.conversation.last_assistant_text
        return True
    listed = "\n".join(f"- {p}" for p in found)
    if m.guards.output_repairs >= REPAIRS:
        return ErrorInfo(
            code=ErrorCode.OUTPUT_INVALID,
            message=f"the final answer does not fit the output schema:\n{listed}",
            details={"errors": found},
        )
    m.guards.output_repairs += 1
    # The schema itself too: a provider without structured output never sent it.
    repair = (
        "Your answer does not fit the required JSON schema:\n"
        f"{listed}\nAnswer again with only JSON that fits the schema:\n"
        f"{json.dumps(schema, ensure_ascii=False)}"
    )
    m.conversation.transcript.append(ChatMessage(role="user", content=repair))
    return False
