"""New workspaces that start with files: `tarry dev` gives every run the tour's notes.

A run's workspace, `<workspace_root>/<run id>`, is made by its first tool call. With a
template, it is made as a copy of the template's files instead, so the agent finds
something to work on; a workspace that exists already is never touched, so a person's
files (or a run's own) are never replaced.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path


def make_workspace(workspace: Path, template: Path | None) -> None:
    """Makes `workspace`, a copy of `template`'s files if given, unless it exists."""
    if workspace.is_dir() or template is None:
        workspace.mkdir(parents=True, exist_ok=True)
        return
    # Filled under a name no run has (run ids never start with a dot), then renamed into
    # place in one step: a call of the same run on another worker, making the workspace
    # meanwhile, sees it either absent or whole, never half copied; and a rename onto a
    # workspace that has files fails instead of replacing them.
    staging = workspace.with_name(f".{workspace.name}.seeding-{uuid.uuid4().hex[:8]}")
    staging.mkdir(parents=True)
    try:
        for source in sorted(template.rglob("*")):
            # Bytes only, not modes: a read-only installed package must not make
            # read-only notes the agent cannot rewrite.
            if source.is_file():
                target = staging / source.relative_to(template)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read_bytes())
        staging.rename(workspace)
    except OSError:
        if not workspace.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
