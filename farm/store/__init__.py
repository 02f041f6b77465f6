"""The history store: what happened to every batch, request and worker, for the planner and the reports.

Engines and migrations in `engine`, the tables in `models`, the stream-to-store `recorder`, the persisted
`knob_store`, the planner's `record_decision`, and read-only `queries`.
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
