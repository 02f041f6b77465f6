"""The planner: the DistRS policy as pure functions, its trace-driven evaluation, the daemon and the backends."""
