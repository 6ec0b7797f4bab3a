"""The HTTP API (extra `api`): REST routes over the client, the runs' events as
server-sent events, and the AG-UI protocol; `tarry serve` and `tarry dev` serve it.

A floor above `tarry` beside `tarry.testing`: it imports the client, the contracts, the
events and the settings, never a workflow, an activity or a worker.
"""

from tarry.api.app import create_app
from tarry.api.server import ApiServer, ApiSetupError, check_exposure

__all__ = ["ApiServer", "ApiSetupError", "check_exposure", "create_app"]
