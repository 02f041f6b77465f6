"""The history store: what happened to every batch, request and worker, for the planner and the reports.

Engines and migrations in `engine`, the tables in `models`, the stream-to-store `recorder` (which turns
events into rows with `ingest`), the persisted `knob_store`, the planner's decisions (`decisions`), and
read-only questions: the planner's history and the extra delays (`queries`), worker-seconds and cost
(`accounting`).
"""

from farm.store.engine import (
    StoreError,
    database_url,
    downgrade,
    make_engine,
    open_store,
    session_factory,
    upgrade,
)

__all__ = ["StoreError", "database_url", "downgrade", "make_engine", "open_store", "session_factory", "upgrade"]
