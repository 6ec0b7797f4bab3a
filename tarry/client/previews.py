"""Whether a gated call's preview is stale: the files it read have changed since it was
made (`tarry.contracts.previews`). The preview itself stays as history recorded it: what
a person decides on is what the run showed, marked when the file has moved on.

Cheap by design: one hash per file the preview read, from a door that can see the
workers' workspaces (the settings' `tarry_workspace_root`, shared under `tarry dev` and
on one host). A door that cannot see them says nothing either way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tarry.contracts.previews import Preview

__all__ = ["stale"]


def stale(preview: Preview, workspace_root: Path) -> bool | None:
    """True when a file the preview read is not as it read it (changed, made, removed);
    False when every one is; None when the preview read no file or its workspace cannot
    be seen from here."""
    if not preview.files or preview.workspace is None:
        return None
    workspace = workspace_root / preview.workspace
    if not workspace.is_dir():
        return None
    for file in preview.files:
        path = (workspace / file.path).resolve()
        if not path.is_relative_to(workspace.resolve()):
            return None  # not a preview a worker made: it resolves paths inside
        now = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        if now != file.sha256:
            return True
    return False
