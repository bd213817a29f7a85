"""Threads and runs in LangGraph Server's shape (``langgraph-sdk`` drives them).

On the package's ``database.py`` (SQLite or Postgres) and ``checkpointers.py``
(LangGraph's saver on the same database): ``store.py`` (threads, runs, events),
``wire.py`` (JSON of states and stream chunks), ``executor.py`` (runs as asyncio tasks:
create, wait, stream, join, cancel, resume), ``routes.py`` (``/teams/{team}/threads/...``
and ``/assistants``).
"""
