"""The `TARRY_CONFIG` file (`ConfigFile`): its tables, checked whole, and the one line
that says what is wrong with it or with the environment (`config_problem`): the
variable, or the file, table and key, with the nearest valid key for a misspelled one,
and never a value, which may be a secret."""

from __future__ import annotations

import difflib
import tomllib
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from tarry.config.limits import LimitsTable
from tarry.config.tables import (
    AgentTable,
    ApiTable,
    EmbeddingProfile,
    McpServer,
    ModelProfile,
    NotifyTarget,
    OAuthProvider,
    fallback_problem,
)
from tarry.contracts.guardrails import Guardrail

__all__ = ["ConfigError", "ConfigFile", "config_problem"]


class ConfigError(Exception):
    """The configuration is wrong: one line (`config_problem`) that names the variable,
    or the file, table and key, and what to do about it."""


class ConfigFile(BaseModel):
    """The `TARRY_CONFIG` file, whole: every table refuses keys it does not know."""

    model_config = ConfigDict(extra="forbid")

    profiles: dict[str, ModelProfile] = {}
    mcp_servers: dict[str, McpServer] = {}
    oauth_providers: dict[str, OAuthProvider] = {}
    """`[oauth_providers.NAME]`: authorization servers whose grants worker tools use."""
    agents: dict[str, AgentTable] = {}
    api: ApiTable = Field(default_factory=ApiTable)
    notify: list[NotifyTarget] = []
    """`[[notify]]` entries: receivers of notifications of runs' stop points."""
    guardrail: list[Guardrail] = []
    """`[[guardrail]]` entries: guardrails every run the worker serves applies before
    its own (`RunInput.guardrails`), which no run can turn off."""
    limits: LimitsTable | None = None
    """`[limits]`: what each person may use and spend (`tarry.config.limits`); none:
    nothing is limited."""
    embedding: EmbeddingProfile | None = None
    """`[embedding]`: the embedding model of semantic search; none: search is lexical."""

    @field_validator("profiles")
    @classmethod
    def _fallbacks_known(cls, profiles: dict[str, ModelProfile]) -> dict[str, ModelProfile]:
        if problem := fallback_problem(profiles):
            raise ValueError(problem)
        return profiles

    @model_validator(mode="after")
    def _grant_names_distinct(self) -> ConfigFile:
        # A person's grants are kept by this name: one name, one authorization server.
        if shared := sorted(set(self.mcp_servers) & set(self.oauth_providers)):
            raise ValueError(
                f"{', '.join(shared)} names both an MCP server and an OAuth provider: grants"
                " are kept by name, so rename one of them"
            )
        return self

    @classmethod
    def read(cls, path: Path) -> ConfigFile:
        """The file at `path`, checked; a `ConfigError` naming the file otherwise."""
        try:
            with path.open("rb") as f:
                return cls.model_validate(tomllib.load(f))
        except OSError as e:
            raise ConfigError(f"TARRY_CONFIG={path}: {e.strerror or e}") from None
        except (tomllib.TOMLDecodeError, ValidationError) as e:
            raise ConfigError(config_problem(e, path)) from None


def config_problem(
    error: ValidationError | tomllib.TOMLDecodeError, file: Path | None = None
) -> str:
    """One line for a configuration `error`: of the environment (`TarrySettings`), or of
    the config `file` (`ConfigFile`). Names the variable, or the file, table and key; a
    key the table does not know comes with the nearest one it does. Never shows a value:
    it may be a secret."""
    if isinstance(error, tomllib.TOMLDecodeError):
        # Its message ends with "(at line L, column C)".
        return f"{file}: not valid TOML: {error}"
    # An unknown key first: a misspelled required key is also reported missing.
    errors = sorted(error.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first, more = errors[0], len(errors) - 1
    if first["type"] == "extra_forbidden":
        *table, key = first["loc"]
        known = _keys_of(tuple(table))
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"the keys are {', '.join(known)}"
        place = f"in {_table_name(tuple(table))}" if table else "at the top level"
        line = f"{file}: unknown key {key!r} {place}; {hint}"
    else:
        where = _where(first["loc"], file)
        line = f"{where}: {_message(first)}" if where else _message(first)
    return line + (f" (and {more} more problem{'s' * (more > 1)})" if more else "")


def _message(error: Any) -> str:
    """Pydantic's message, without the "Value error, " it puts before a validator's own."""
    if error["type"] in ("value_error", "assertion_error"):
        return str(error["ctx"]["error"])
    return str(error["msg"])


def _where(loc: tuple[int | str, ...], file: Path | None) -> str:
    """`TARRY_X` for the environment's field `tarry_x`; `FILE: [table] key` in the file.
    List positions are left out: a list in a configuration is short."""
    names = tuple(part for part in loc if isinstance(part, str))
    if file is None:
        return names[0].upper() if names else ""
    if not names:
        return str(file)
    kind = _type_at(names)
    if _is_table(kind) or (get_origin(kind) is list and _is_table(get_args(kind)[0])):
        return f"{file}: {_table_name(names)}"
    *table, key = names
    return f"{file}: {_table_name(tuple(table))} {key}" if table else f"{file}: {key}"


def _table_name(names: tuple[int | str, ...]) -> str:
    """`[a.b]`, or `[[a]]` for an array of tables (`[[notify]]`), whose positions are left out."""
    keys = tuple(part for part in names if isinstance(part, str))
    kind = _type_at(keys)
    if get_origin(kind) is list and _is_table(_optional_of(get_args(kind)[0])):
        return f"[[{'.'.join(keys)}]]"
    return f"[{'.'.join(keys)}]"


def _keys_of(table: tuple[int | str, ...]) -> list[str]:
    """The keys the config file's table at `table` knows."""
    kind = _type_at(table)
    return list(kind.model_fields) if _is_table(kind) else []


def _type_at(loc: tuple[int | str, ...]) -> Any:
    """The type of what is at `loc` in `ConfigFile`: a model for a table."""
    kind: Any = ConfigFile
    for part in loc:
        # A position may be left out (`_where`): a name then belongs to the list's items.
        if isinstance(part, str) and get_origin(kind) is list:
            kind = _optional_of(get_args(kind)[0])
        if _is_table(kind):
            field = kind.model_fields.get(str(part))
            kind = _optional_of(field.annotation) if field else None
        elif get_origin(kind) in (dict, list):
            kind = _optional_of(get_args(kind)[-1])
        else:
            return None
    return kind


def _optional_of(kind: Any) -> Any:
    """`T` for `T | None`, as a table's type."""
    if get_origin(kind) in (Union, types.UnionType):
        kinds = [k for k in get_args(kind) if k is not type(None)]
        return kinds[0] if len(kinds) == 1 else kind
    return kind


def _is_table(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)
