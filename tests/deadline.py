"""The one deadline every wait in the suite comes from.

A test waits for something real: a run's next stop point, a process's exit, a line on a
pipe. How long that takes depends on the machine: on a busy 2-core one (another suite,
a build, `scripts/test --under-load`'s CPU hog) everything takes a few times longer,
and a bound that held on an idle machine fails a test that was right. So no test bounds
a wait with a bare number of seconds (`tests/test_deadlines.py` checks it): it asks
`deadline(seconds)`, the bound on an idle machine times `TARRY_TEST_TIMEOUT_SCALE`
(1 by default; `scripts/test --under-load` sets 2). pytest-timeout's per-test bound
scales with it too (`tests/conftest.py`).

Only bounds scale. What a test asserts about a timeout of the product (a tool's
one-second attempt timeout firing, an approval deadline passing) is behaviour, set in
the run's `Timeouts`, and stays as it is; so do poll intervals, which bound nothing. The
timeouts of the product that scale are those of the suite's runs (`FAST_TIMEOUTS`): the
model call's heartbeat (`HEARTBEAT`), which bounds how long a live worker may go unheard, and
the attempts, which bound real work.
"""

from __future__ import annotations

import os
from datetime import timedelta

__all__ = ["HEARTBEAT", "SCALE", "SCALE_VARIABLE", "TIMEOUT", "deadline"]

SCALE_VARIABLE = "TARRY_TEST_TIMEOUT_SCALE"


def _scale() -> float:
    # Read once, at import: the suite's autouse fixture clears TARRY_* variables
    # from each test's environment, so a test could not read it later.
    text = os.environ.get(SCALE_VARIABLE, "1")
    try:
        scale = float(text)
    except ValueError:
        scale = 0.0
    if not scale > 0:
        raise ValueError(f"{SCALE_VARIABLE}={text!r}: expected a positive number, e.g. 2")
    return scale


SCALE = _scale()
"""How much longer than on an idle machine every wait may take."""


def deadline(seconds: float) -> float:
    """The bound for a wait that takes well under `seconds` on an idle machine."""
    return seconds * SCALE


TIMEOUT = deadline(60.0)
"""The usual bound: a run reaching its next stop point, a command ending, a worker
starting. Waits that need another name it with `deadline(...)`."""

HEARTBEAT = timedelta(seconds=deadline(5))
"""The model call's heartbeat timeout of the suite's runs (`Timeouts.llm_heartbeat`): how
soon a dead worker, or a stream stuck mid-answer, is noticed. It bounds a live worker too:
sdk-core sends a call's heartbeats at most every 80% of it, so a stall of the worker's
process (a long garbage collection, a busy machine) past the other 20% times a live call
out. At 2 s that was 0.4 s; at 5 s it is 1 s, and it scales with every other deadline. A
test that waits for it to fire bounds the wait with it plus a deadline of its own."""
