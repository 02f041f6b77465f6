"""The farm's tests: a regular package, so a dependency that ships a top-level `tests` package (verl does)
cannot shadow it."""
