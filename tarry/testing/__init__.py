"""Utilities for testing and demonstrating Tarry without a real model, like
`temporalio.testing`: the scripted OpenAI-compatible model (`scripted_model`).

Needs the `testing` extra (`pip install 'tarry[testing]'`). It imports only the ground
floor (`tarry` contracts); a worker or client never imports it.
"""
