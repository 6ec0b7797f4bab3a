"""The model kept failing past `Timeouts.llm_ask_after` (`RunState.error` says how): a
person retries it, switches to another profile first (`set_model`), or replies. No
`[[notify]]` event of its own: it is an operator's matter, seen in `tarry list`."""

from tarry.contracts.audit import Act
from tarry.contracts.names import Need, WaitingFor
from tarry.contracts.waits.kind import Ending, WaitKind

__all__ = ["KIND"]

KIND = WaitKind(
    kind=WaitingFor.MODEL,
    label="model",
    waits_for="its model",
    hint="the model keeps failing ({error}); `tarry retry {run}`,"
    " `tarry model {run} PROFILE` then retry, or reply",
    ends=(
        Ending(message="retry", who=Need.WRITE, act=Act.RETRY),
        Ending(message="send", who=Need.WRITE, act=Act.REPLY),
    ),
    notify=None,
)
