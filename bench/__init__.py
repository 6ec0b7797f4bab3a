"""The benchmarks: `scripts/bench` (`python -m bench`) prints their tables.

Every figure that is a time is also given as a ratio to a reference measured in the
same run, because the machines this runs on are noisy; nothing here asserts a time.
"""
