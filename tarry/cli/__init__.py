"""The roof: what people run, above `workers/`. The `tarry` command line: the app
(`app`), its commands one module per group (`runs`, `watching`, `approvals`, `model`,
`local`, `serve`) over one layer of errors and output (`common`); the chat, following a
run live (`follow`, `live`) and the terminal rendering (`render`); the dev stack (`tarry
dev`: `devstack`, `devserver`), the dev server and worker processes, the demo, the MCP
server and the codec server.

Needs the `cli` extra (`pip install 'tarry[cli]'`). Nothing below this package imports it.
"""

from __future__ import annotations

import sys
from typing import NoReturn

__all__ = ["main"]

_CLI_EXTRA = {"typer", "rich", "aiohttp"}
"""What the `cli` extra installs for the command itself (beside the dev server)."""


def main() -> NoReturn:
    """The `tarry` command (`app.main`); where the `cli` extra is missing, one line that
    says how to install it, not an import traceback."""
    try:
        from tarry.cli.app import main as run
    except ModuleNotFoundError as e:
        if e.name not in _CLI_EXTRA:
            raise
        sys.exit(
            f"error: the tarry command needs the cli extra ({e.name} is missing); "
            "install it with: pip install 'tarry[cli]'"
        )
    run()
