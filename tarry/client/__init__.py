"""The client: start agent runs, talk to them, find them again, and what is built on that.

In rooms of one reason to change each: `front_door.py` (`Tarry`, the front door to runs
and schedules), `starting.py` (starts a run and answers its bare workflow handle),
`run_handle.py` (`RunHandle`, talks to one run), `delivery.py` (reaches a run through
queries and updates), `stopping.py`, `timeline.py` (a run's spans), `audit.py` (who did
what to runs), `run_list.py` (finding runs), `schedules.py` and `schedule_handle.py`,
datasets and evals (`datasets.py`, `dataset_store.py`, `evals.py`), and
`temporal_errors.py` underneath them all. It stands on the Temporal connection and the
floors under it; the HTTP API, the command line and `tarry.testing` stand on it, and a
worker never loads it.

This is its face: a name is imported from its module on its first use, as `tarry`'s
are, so `import tarry.client` loads nothing, and a process loads only the rooms it uses
(`tarry dataset list`: the dataset store, never `Tarry` nor Temporal's client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tarry._lazy import lazy_face

if TYPE_CHECKING:
    from tarry.client.datasets import Datasets
    from tarry.client.delivery import QUERY_PATIENCE
    from tarry.client.front_door import Admission, Tarry
    from tarry.client.run_handle import RunHandle
    from tarry.client.schedule_handle import ScheduleHandle
    from tarry.contracts import SUMMARY_MEMO
    from tarry.core.errors import TarryError
    from tarry.temporal.connection import connect_temporal

__all__ = [
    "QUERY_PATIENCE",
    "SUMMARY_MEMO",
    "Admission",
    "Datasets",
    "RunHandle",
    "ScheduleHandle",
    "Tarry",
    "TarryError",
    "connect_temporal",
]

_HOMES = {
    "tarry.client.front_door": ("Admission", "Tarry"),
    "tarry.client.run_handle": ("RunHandle",),
    "tarry.client.schedule_handle": ("ScheduleHandle",),
    "tarry.client.datasets": ("Datasets",),
    "tarry.client.delivery": ("QUERY_PATIENCE",),
    "tarry.contracts": ("SUMMARY_MEMO",),
    "tarry.core.errors": ("TarryError",),
    "tarry.temporal.connection": ("connect_temporal",),
}

if not TYPE_CHECKING:  # mypy reads the imports above, so a misspelt name stays an error
    __getattr__ = lazy_face(__name__, _HOMES)
