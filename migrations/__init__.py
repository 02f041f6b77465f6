"""Alembic migrations of the history store (`farm db upgrade`); shipped with the package."""
