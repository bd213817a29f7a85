"""Threads and runs in LangGraph Server's shape (``langgraph-sdk`` drives them).

``database.py`` (SQLite or Postgres), ``checkpointers.py`` (LangGraph's saver on the same
database), ``store.py`` (threads, runs, events), ``wire.py`` (JSON of states and
stream chunks), ``executor.py`` (runs as asyncio tasks: create, wait, stream, join,
cancel, resume), ``routes.py`` (``/teams/{team}/threads/...`` and ``/assistants``).
"""
