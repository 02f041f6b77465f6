"""The planner, in three parts that import in one direction: `policy` (the DistRS policy as pure
functions), `eval` (its trace-driven evaluation) and `runtime` (the daemon that applies it to a live
farm), with `backends` (where workers live) beside the runtime."""
