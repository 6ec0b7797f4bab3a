"""`python -m workers`: one worker process, configured from the environment."""

from __future__ import annotations

import sys
from typing import NoReturn

from tarry.config.logs import configure_logging
from tarry.config.settings import TarrySettings
from tarry.temporal.codec import EncryptionKeyError
from tarry.temporal.connection import ConnectError
from tarry.temporal.entrypoint import run_main, settings_or_exit
from workers.telemetry import TracingExtraMissing
from workers.worker import WorkerSetupError, run_worker


async def _main(settings: TarrySettings) -> int:
    try:
        await run_worker(settings)
    except (WorkerSetupError, EncryptionKeyError, TracingExtraMissing) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except ConnectError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


def main() -> NoReturn:
    configure_logging()
    settings = settings_or_exit()
    run_main(lambda: _main(settings))


if __name__ == "__main__":
    main()
