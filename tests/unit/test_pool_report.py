"""What the daemon's heartbeat says of the pools, and how `farm status` shows pending workers and nodes."""

from __future__ import annotations

from farm.protocol.heartbeat import Heartbeat, Pool
from planner.backends import Worker, WorkerState
from planner.runtime.service import pool_report


def worker(name, state, node="", stage="cuda.execute"):
    return Worker(name, stage, state, 0.0, "ray", name, node=node)


def test_the_pool_report_counts_workers_by_state_and_the_alive_placed_ones_by_node():
    workers = [worker("a", WorkerState.RUNNING, "10.0.0.2/aa"), worker("b", WorkerState.STARTING, "10.0.0.2/aa"),
               worker("c", WorkerState.RUNNING, "10.0.0.3/bb"), worker("d", WorkerState.PENDING),
               worker("e", WorkerState.STOPPING, "10.0.0.3/bb"), worker("f", WorkerState.RUNNING, stage="cuda.compile")]

    report = pool_report(workers)

    assert report["cuda.execute"] == Pool(pending=1, starting=1, running=2, stopping=1,
                                          nodes={"10.0.0.2/aa": 2, "10.0.0.3/bb": 1})
    assert report["cuda.compile"].nodes == {}  # a backend that does not say where its workers run


def test_farm_status_reports_pending_workers_and_workers_per_node():
    from farm.app.cli import status as status_cli
    from farm.knobs import Knobs
    from farm.protocol.live import LiveState

    planner = Heartbeat(pid=1, at=0.0, backend="ray", pools=pool_report(
        [worker("a", WorkerState.RUNNING, "10.0.0.2/aa"), worker("d", WorkerState.PENDING),
         worker("e", WorkerState.PENDING)]))
    report = status_cli.status_report(LiveState(now=0.0, scheduler="ebf", batches=(), stages={}), Knobs(), planner)

    assert report["stages"]["cuda.execute"]["pending"] == 2
    assert report["stages"]["cuda.execute"]["nodes"] == {"10.0.0.2/aa": 1}
