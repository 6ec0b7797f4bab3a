"""Keeps a long-running worker's memory from growing with the length of its runs.

A cached run holds its whole `RunMemory` (MiBs for a chat of long messages). At
each continue-as-new the worker drops that run and builds the next from the handed-over
copy. Two things then kept the old copies, so memory grew with every hand-over:

- *The cyclic garbage collector's schedule.* A dropped run's workflow instance sits in
  reference cycles, freed only by a full collection, which CPython runs once the objects
  that survived earlier collections grow by a quarter. A worker's long-lived objects are
  mostly its imports (hundreds of thousands), and a transcript is few objects holding
  large strings, so dropped copies piled up: at turn 1,500 of the long-run benchmark the
  worker held 7 copies of the conversation (81 MiB of message text) where 2 were live.
  `gc.freeze()` once the worker is built takes the imports out of that count, so a full
  collection comes as soon as garbage reaches a quarter of the objects runs really hold.
- *glibc's dynamic mmap threshold.* `malloc` serves blocks of 128 KiB and more with
  `mmap` and returns them when freed; but each such free raises the threshold to the
  block's size (up to 32 MiB), and from then on the hand-over's serialised memory and each
  turn's model request (up to its context budget) are carved from the heap between
  long-lived small objects, leaving holes it cannot give back: 42 of 96 MiB of heap were
  free but held at turn 1,300. Fixing the threshold at its default keeps them mmapped.

The transcript itself no longer grows a run's memory: a run keeps the model's window of
it and pages the rest out to the payload store (`workflows/pages.py`), and the model
activity's cached conversations keep the same window (`activities/context.py`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging

log = logging.getLogger("tarry.worker")

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 128 * 1024
"""glibc's own default for both: setting it is what turns the dynamic adjustment off."""


def keep_memory_flat() -> None:
    """Call once the worker's modules are imported and its parts built, before it runs."""
    gc.freeze()
    _fix_malloc_thresholds()


def _fix_malloc_thresholds() -> None:
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return  # not glibc (musl, macOS): no such threshold to fix
    for option in (_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD):
        if not mallopt(option, _THRESHOLD):
            log.warning("glibc refused mallopt(%d, %d)", option, _THRESHOLD)
