"""Replaying a trace's trainers against the live farm, K times faster, and measuring what the farm did.

The synthetic pipeline sleeps s_ij / K, each batch opens at start_s / K and its requests arrive at
r_i / K; the stage timeouts and the tolerated delay D are divided by K through the knobs, so the farm
and its planner face the trace's workload on a compressed clock. One client per task, each in its own
thread, as separate trainers would be. The report is measured from the history store (docs/design.md's
metrics, times multiplied back by K) and shown beside `farm eval`'s prediction for the same trace.

`plan` chooses what is replayed and when, `trainer` plays one task, `runner` runs the whole and predicts
it, `metrics` measures the report and `physics` fits the workers' start-up, exit lag and dispatch latency.
"""

from farm.app.live_replay.plan import ReplayError, ReplayOptions, parse_tasks, select
from farm.app.live_replay.runner import predict, predict_result, run, same_run

__all__ = ["ReplayError", "ReplayOptions", "parse_tasks", "predict", "predict_result", "run", "same_run", "select"]
