"""Running a replay against the live farm, and `farm eval`'s prediction of the same run to set beside it.

The prediction is made with the worker physics measured on the run itself, so a gap between the two is
the planner's or the model's, not the machine's.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping

import redis as redis_lib

from farm import registry
from farm.app import fair_shares
from farm.app.live_replay import metrics
from farm.app.live_replay.metrics import RecordingTimeout, last_completion, measure, wait_recorded, within
from farm.app.live_replay.physics import worker_physics
from farm.app.live_replay.plan import (ReplayError, ReplayOptions, check_pipeline, farm_shares, replay_knobs,
                                       tenant_ids, tenant_labels, trace_knobs)
from farm.app.live_replay.trainer import Trainer
from farm.client.sync import RewardClient
from farm.config import redis_url
from farm.knobs import Knobs
from farm.protocol import counters
from farm.store.knob_store import KnobStore
from planner.eval import loop
from planner.eval.trace import Trace
from planner.policy.capacity import Capacity
from planner.runtime import native
from planner.runtime.live import observed_startup


def predict_result(trace: Trace, knobs: Knobs, options: ReplayOptions) -> Any:
    """`farm eval`'s replay of the same trace and knobs, its worker physics (real seconds) times K: a new
    worker ready (startup_s + startup_per_start_s x workers starting) x K later, a retired one gone
    retire_s x K later, a request at its worker dispatch_s x K after it is taken, the policy told a
    start-up of policy_startup_s x K, on a cluster of `options.capacity` (`farm eval --capacity`), the trace's
    tenants with `options.shares` (`farm eval --share`)."""
    native.load()  # the compiled sweeps where this machine can build them: the same prediction, faster
    k = options.speed
    told = None if options.policy_startup_s is None else options.policy_startup_s * k
    return loop.evaluate(trace, knobs, startup_s=options.startup_s * k, startup_per_start_s=options.startup_per_start_s * k,
                         retire_s=options.retire_s * k, dispatch_s=options.dispatch_s * k, policy_startup_s=told,
                         seed=options.seed, pipeline=options.pipeline, capacity=options.capacity,
                         shares=dict(options.shares))


def same_run(options: ReplayOptions, report: Mapping[str, Any]) -> ReplayOptions:
    """The options of a run's prediction: the worker physics measured on that run (`report["physics"]`), the
    planner told the start-up it was told live: the median of what its decisions planned with
    (`report["policy_startup_s"]`), else the larger of the configured one and the observed median
    (`report["startup_s"]`); on the cluster its decisions planned within (`report["capacity"]`, workers per
    kind; {} none bounded), else the options' own."""
    physics = report["physics"]
    told = report.get("policy_startup_s")
    cluster = report.get("capacity")
    return replace(options, startup_s=physics["startup_s"], startup_per_start_s=physics["startup_per_start_s"],
                   retire_s=physics["retire_s"], dispatch_s=physics["dispatch_s"],
                   policy_startup_s=told if told is not None else max(options.startup_s, report["startup_s"]),
                   # a fixed cluster, as `farm eval --capacity` replays on (an autoscaler's nodes as there from the start)
                   capacity=options.capacity if cluster is None else Capacity(placeable=cluster, most=cluster))


def predict(trace: Trace, knobs: Knobs, options: ReplayOptions) -> dict[str, Any]:
    """`farm eval --json`'s object for the same trace and knobs."""
    return predict_result(trace, knobs, options).summary()


def run(settings: Any, engine: Any, trace: Trace, options: ReplayOptions, *,
        on_result: Callable[[str], None] | None = None, predict_too: bool = True) -> dict[str, Any]:
    """Play the trainers of `trace` against the farm at `settings`; the report measured beside the prediction.

    The farm must be serving (workers, or a planner daemon that sizes the pools). The knobs are set for
    the compressed clock for the run and restored afterwards. A batch with a `tenant` is opened under that
    tenant's names (`plan.tenant_ids`), and `options.shares` are in force for the run under those tenants'
    labels (`fair_shares.held`), their entries restored afterwards."""
    check_pipeline(trace, registry.get(options.pipeline))
    ids = tenant_ids(trace)
    published = farm_shares(trace, options.shares)
    client_redis = redis_lib.Redis.from_url(redis_url(settings))
    store = KnobStore(engine, client_redis, settings.namespace)
    before = store.load()
    in_trace_time = trace_knobs(before, trace, options)
    live = replay_knobs(in_trace_time, trace, options.pipeline, options.speed)
    store.save(live)
    clients: list[Any] = []
    sharing = ExitStack()
    reserved = any(share.reserve for share in options.shares.values())  # the farm may preempt: count its stops
    try:
        sharing.enter_context(fair_shares.held(client_redis, settings.namespace, published))
        stopped_before = counters.read(client_redis, settings.namespace).preempted if reserved else {}
        t0 = time.time() + 0.2
        trainers = []
        for task in trace.tasks:
            client = RewardClient(settings)
            clients.append(client)
            trainers.append(Trainer(client, trace, task, options.speed, t0, on_result or (lambda task: None),
                                    options.pipeline, ids))
        for trainer in trainers:
            trainer.start()
        for trainer in trainers:
            trainer.join()
        outcomes = [t.outcome for t in trainers]
        errors = [f"{o.task}: {o.error}" for o in outcomes if o.error]
        if errors:
            raise ReplayError("the replay failed: " + "; ".join(errors)
                              + " (is the farm serving: `farm up`, and `farm planner` or fixed workers?)")
        batch_ids = [bid for o in outcomes for bid in o.batch_ids]
        try:
            wait_recorded(engine, batch_ids, options.record_timeout_s)
        except RecordingTimeout as exc:
            raise ReplayError(str(exc)) from exc
        # the prediction for *this* run: new workers as slow to start, retired ones as slow to exit, as
        # they were on this machine during it
        end = last_completion(engine, batch_ids)
        physics = worker_physics(engine, since=t0 - 60.0, until=end, startup_s=options.startup_s,
                                 startup_per_start_s=options.startup_per_start_s, retire_s=options.retire_s,
                                 dispatch_s=options.dispatch_s)
        startup = observed_startup(engine, since=t0 - 60.0) or options.startup_s
        told = metrics.planned_startup(engine, since=t0 - 60.0, until=end, pipeline=options.pipeline)
        cluster = metrics.planned_capacity(engine, since=t0 - 60.0, until=end, pipeline=options.pipeline)
        measured = measure(engine, trace, batch_ids, start=t0, pipeline=options.pipeline, speed=options.speed,
                           knobs=live, startup_s=startup,
                           tenants={label: name for name, label in tenant_labels(trace).items()})
        if reserved:  # as `farm eval` reports them, only then
            measured["preempted"] = preempted_during(trace, options.pipeline, stopped_before,
                                                     counters.read(client_redis, settings.namespace).preempted)
    finally:
        sharing.close()
        store.save(before)
        for client in clients:
            client.close()
        client_redis.close()
    expected = {(bid, str(i)) for o in outcomes for bid, size in o.sizes.items() for i in range(size)}
    seen = {key: n for o in outcomes for key, n in o.results.items()}
    report: dict[str, Any] = {
        "measured": measured,
        "started_at": t0,  # epoch seconds of the trace's origin on the farm's clock
        "startup_s": startup,  # real seconds a new worker took to be ready here (median)
        "policy_startup_s": told,  # real seconds the planner's decisions planned a start-up to take (median)
        # workers per resource kind the planner's decisions planned within ({}: none bounded; None: not recorded)
        "capacity": cluster,
        "physics": physics.to_dict(),  # what the prediction assumes, measured on this run (real seconds)
        "tenants": tenant_labels(trace),  # the farm's label of each of the trace's tenants
        "shares": {name: share.to_dict() for name, share in sorted(options.shares.items())},
        "results": {
            "expected": len(expected),
            "received": sum(seen.values()),
            "lost": len(expected - set(seen)),
            "duplicated": sum(n - 1 for n in seen.values() if n > 1),
            "statuses": _merge(o.statuses for o in outcomes),
        },
    }
    report["knobs"] = in_trace_time.to_dict()
    if predict_too:
        report["predicted"] = predict(trace, in_trace_time, same_run(options, report))
        report["fidelity"] = within(measured, report["predicted"])
    return report


def preempted_during(trace: Trace, pipeline: str, before: Mapping[str, int],
                     after: Mapping[str, int]) -> dict[str, int]:
    """The running requests the farm stopped for a reserving tenant during the run, per stage (the `preempted`
    counters are the farm's, since it started: the run's are what they grew by)."""
    queues = {stage.name: f"{pipeline}.{stage.name}" for stage in trace.stages}
    return {name: after.get(q, 0) - before.get(q, 0) for name, q in queues.items()}


def _merge(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))
