"""The policy core: `decide(snapshot, knobs, rng) -> Decision`, pure functions of frozen data, no I/O.

`snapshot` is what the policy sees and answers; `estimate` is Algorithm 2 (the requests still to come and
those in flight, from history), `simulate` is SIMULATE (one `sweep` per stage), `search` is Algorithm 1,
`decide` puts them together with the baselines, within the cluster's `capacity` (`held`: what that
holds back). The same code sizes a live farm (planner.runtime) and replays a trace (planner.eval)."""
