"""Contracts a person writes by hand (a run's input and its parts): a field they do not
know is refused, naming the nearest one they do, since a misspelled option ignored
without a word leaves the option off (`require_aproval` would run every tool unasked)."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from tarry.contracts.names import ErrorCode


def _not_a_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("a boolean is no number")
    return value


NOT_A_BOOLEAN = BeforeValidator(_not_a_boolean)
"""On a number a person writes: pydantic takes `true` as 1, so a budget of `true` would be
$1; `1.0` stays 1, as JSON Schema's `integer` has it."""


def unknown_field_problem(name: str, known: list[str]) -> str:
    """What to say of the field `name` among the `known` ones: the nearest, or all."""
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"the fields are {', '.join(known)}"
    return f"unknown field {name!r}; {hint}"


class Closed(BaseModel):
    """A model that refuses an unknown field: 422 `INPUT_INVALID` at the API (the error's
    type is the code), a `ValidationError` in Python. Its JSON schema says so
    (`additionalProperties: false`)."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known_fields(cls, data: Any) -> Any:
        if isinstance(data, dict):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            for name in data:
                if name not in known and name not in cls.model_fields:
                    raise PydanticCustomError(
                        ErrorCode.INPUT_INVALID.value,
                        "{problem}",
                        {"problem": unknown_field_problem(str(name), known)},
                    )
        return data


def input_problem(error: ValidationError) -> str:
    """One line for an input's first problem: where it is, and what it is."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
