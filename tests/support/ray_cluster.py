"""A Ray cluster of several nodes on this machine for the ray backend's tests and benchmarks: a head with
no worker resources, a node that declares 2 GPUs (and no CPU, so CPU stages never land there), and a
CPU node. Runs only inside a loopback-only network namespace (tests.support.loopback_ns)."""

from __future__ import annotations

import os

import pytest

from tests.support import loopback_ns

REQUIRE_ENV = "FARM_REQUIRE_RAY"


def require_namespace() -> None:
    """Skip (or, with FARM_REQUIRE_RAY=1 as CI sets it, fail) outside the loopback-only namespace."""
    why = None
    if not loopback_ns.inside():
        why = ("Ray tests run inside a loopback-only network namespace: "
               "python -m tests.support.loopback_ns python -m pytest -m ray tests/")
    else:
        try:
            import ray  # noqa: F401
        except ImportError:
            why = "ray is not installed (pip install 'reward-farm[ray]')"
    if why:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)


class LocalCluster:
    """`ray.cluster_utils.Cluster` with the farm's test shape; `add_node` / `remove` for nodes that come and go."""

    def __init__(self, cpu_node_cpus: int = 4, gpu_node_gpus: int = 2) -> None:
        from ray.cluster_utils import Cluster

        self._cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        self.gpu_node = self._cluster.add_node(num_cpus=0, num_gpus=gpu_node_gpus)
        self.cpu_node = self._cluster.add_node(num_cpus=cpu_node_cpus)
        self._cluster.wait_for_nodes()
        self.address = self._cluster.address
        _ADDRESS[:] = [self.address]

    def node_id(self, node) -> str:
        return node.node_id

    def add_node(self, **args):
        """A node joins (`ray.cluster_utils.Cluster.add_node`'s arguments: num_cpus, num_gpus, resources)."""
        node = self._cluster.add_node(**args)
        self._cluster.wait_for_nodes()
        return node

    def remove(self, node) -> None:
        self._cluster.remove_node(node)

    def shutdown(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        self._cluster.shutdown()


_ADDRESS: list[str] = []


def connected() -> None:
    """This test process as a driver of the session's cluster (for what tests do behind the backend's back)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=_ADDRESS[0], logging_level="WARNING", log_to_driver=False)
