"""Utilities for testing and demonstrating Tarry without a real model, like
`temporalio.testing`: the scripted model (`scripted_model`), which speaks OpenAI's
`chat.completions` and Anthropic's Messages API from the same scripts (`script`).

Needs the `testing` extra (`pip install 'tarry[testing]'`). It imports only the ground
floor (`tarry` contracts); a worker or client never imports it.
"""
