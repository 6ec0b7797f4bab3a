"""A tool call needs a person's own grant to an MCP server (`auth = "oauth"`), or to an
OAuth provider a worker's tool uses (`@tool(oauth=...)`), that they have not given, or
that stopped working (`RunState.auth_needed` names the server and the person): their
connect link (the API's `/v1/oauth/connect/RUN/SERVER`, shown by `tarry status`, the
inbox and the notification) runs the authorization flow, whose callback tells the run
(`connected`), and the call runs."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, NotifyEvent, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.AUTH,
    label="auth",
    waits_for="a person to connect their account",
    hint="a tool needs a person's own account: `tarry status {run}` shows whose, and the"
    " link that connects it",
    ends=(Ending(message="connected", signal=True, who=Need.WRITE, act=Act.CONNECT),),
    notify=NotifyEvent.WAITING_FOR_AUTH,
)
