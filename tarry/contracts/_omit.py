"""When a contract's field stays out of its JSON (`Field(exclude_if=...)`): compatibility
fields at their defaults add nothing to history."""

from __future__ import annotations

from tarry.contracts.names import ReplyPolicy


def when_empty(value: object) -> bool:
    return not value


def when_none(value: object) -> bool:
    return value is None


def when_queue(value: object) -> bool:
    return value is ReplyPolicy.QUEUE


# --- Messages, in the OpenAI chat format -----------------------------------
