"""The planner's runtime shell around the pure policy: the daemon's decision epochs, the live view that
builds the policy's snapshot from Redis and the history store, turning decisions into pool changes, and
the wiring to a backend (`service`)."""
