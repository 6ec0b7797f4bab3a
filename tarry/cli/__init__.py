"""The roof: what people run, above `workers/`. The `tarry` command line (`app`), the
chat, the terminal rendering, the dev stack (`tarry dev`), the demo and the codec server.

Needs the `cli` extra (`pip install 'tarry[cli]'`). Nothing below this package imports it.
"""
