"""A wait polls often while most waits end, then less and less often: a query costs the
worker and the server CPU, and a wait can last minutes."""

from __future__ import annotations

from itertools import islice

from tarry.client.delivery import polling_pauses


def test_a_wait_polls_every_50_ms_at_first_then_less_often_up_to_twice_a_second() -> None:
    pauses = list(islice(polling_pauses(), 20))

    assert pauses[0] == 0.05
    assert pauses == sorted(pauses)
    assert pauses[-1] == 0.5
    assert sum(pauses[:5]) < 1  # a wait of a turn's step still ends within its first second
