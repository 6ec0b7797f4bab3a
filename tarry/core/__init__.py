"""The pure core: what the workflow and every door above it compute alike, from the
contracts alone. `text` (summaries, `shorten`, `redact`), `identities` (who a caller is,
which names a person may have), `limits` (what a caller may use and spend, from
`[limits]`), `ownership` (who may read and write a run), `errors` (`TarryError` and its
codes), `eval_scoring` (an eval's report from its decision points),
`tools` (how a tool is declared: `@tool`, `ToolContext`), `action_links` (the signed
token of a notification's approve or reject link: the worker signs it, the HTTP API
checks it).

No I/O, no clock, no randomness, and no Temporal client: the worker passes `workflows`
through its sandbox, and what a workflow imports with it (these modules and
`tarry.contracts`, nothing else: `tests/test_layers.py` says so) then runs unchecked.
"""
