"""The Temporal connection and storage: how a process connects to Temporal
(`connection.py`), the payload codec that encrypts what it sends (`codec.py`), the store
of large payloads (`storage.py`) and of a run's transcript pages in it (`pages.py`), and
the servers Tarry starts itself (`servers.py`). It stands on the configuration; the
client and the worker stand on it.
"""
