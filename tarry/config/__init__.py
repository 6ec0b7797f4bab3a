"""Configuration: the settings every process reads from its environment and Tarry's
config file (`settings.py`), and that file's tables (`tables.py`, and `[limits]`'s in
`limits.py`). Checked whole when a process starts, and read by everything above: the
connection, the client, the worker.
And how a process logs (`logs.py`): a worker's expected failures one line each, a
command's warnings as `warning: ...` lines. It stands on the contracts and the pure
core, and loads no client.
"""
