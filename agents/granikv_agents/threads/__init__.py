"""Threads and runs in LangGraph Server's shape (``langgraph-sdk`` drives them).

On the package's ``database.py`` (SQLite or Postgres) and ``checkpointers.py``
(LangGraph's saver on the same database): ``store.py`` (threads, runs, events),
``wire.py`` (JSON of states and stream chunks), ``streaming.py`` and ``messages.py``
(what a run streams, in LangGraph Server's events), ``slots.py`` (one run per thread, atomic
admission), ``fit.py`` (a run's length against the model), ``executor.py`` (runs as
asyncio tasks: create, wait, stream, join, cancel, resume), ``routes.py``
(``/teams/{team}/threads/...`` and ``/assistants``).
"""
