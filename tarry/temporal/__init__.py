"""The Temporal connection and storage: how a process connects to Temporal
(`connection.py`), the payload codec that encrypts what it sends (`codec.py`), the store
of large payloads (`storage.py`) and of a run's transcript pages in it (`pages.py`), and
the servers Tarry starts itself (`servers.py`), and what every entry point does at its
start and end (`entrypoint.py`: its settings checked with the connection's, and its exit
past the SDK's shutdown abort, sdk-python #300). It stands on the configuration; the
client and the worker stand on it.
"""
