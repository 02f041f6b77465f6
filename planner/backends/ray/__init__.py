"""The ray backend: each worker a detached Ray actor that runs `farm worker` as its child
(planner.backends.ray.actor says why a child), so a farm's pools span every node of a Ray cluster and
GPU stages land on GPU nodes.

- Naming: actors are named after their workers in the Ray namespace `reward-farm.<namespace>`, so a
  restarted daemon re-adopts exactly its own farm's actors, and a retried spawn finds the same names.
- Resources per stage (planner.backends.ray.spec): by resource kind (a core, one GPU, a quarter of a
  core), overridden per stage queue, pipeline or kind, with custom resources and node labels to keep a
  stage on the nodes that can run it, and a `runtime_env` for the nodes that lack the farm's code.
- Pending: an actor Ray cannot place yet (no node has room) is `pending`. It counts toward its pool (the
  daemon does not ask again and again) but not as allocated: its life is recorded with `pending`, and
  allocated only from `worker_placed`. Pending actors are what Ray's autoscaler (KubeRay, cloud node
  providers) adds nodes for; retiring one frees nothing, so it is killed at once.
- Node loss: the node's actors die and their workers with them (tethered); the GCS marks the actors dead
  within seconds, the next `list` closes their lives at the time of death, the farm's leases return their
  requests, and the next decision spawns replacements where there is room.
- Records: `<namespace>:ray:lives` (name -> stage, spawned, placed) is written before an actor is asked
  for, and `<namespace>:ray:stopping` holds the retirements; both live in the farm's Redis, so a
  restarted daemon closes the lives of actors that died while it was away.
- Every Ray call goes through one driver process (planner.backends.ray.bridge): a Ray driver exits when
  it loses the cluster, and the daemon must not; it logs, keeps serving and tries again.

- Capacity (planner.backends.ray.capacity): the nodes' resources in workers of each kind, by the kinds'
  resources here; the autoscaler's maximum where its config is visible, else FARM_MAX_GPUS / FARM_MAX_CPUS;
  and how long workers waited for a node the autoscaler added (FARM_NODE_STARTUP_S until one did).

Workers on other nodes reach the farm's Redis and history store with the URLs in the farm's settings,
so those must name addresses the nodes can reach (docs/ray.md says what the network must allow).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from farm.config import Settings
from farm.pipeline import RESOURCES
from farm.protocol.keys import Keys
from planner.backends import Worker, WorkerState, common
from planner.backends.capacity import DEFAULT_NODE_STARTUP_S, limits_from_env, node_startup_from_env
from planner.backends.lifecycle import Observed, Retirements, state_of
from planner.backends.ray.bridge import Bridge
from planner.backends.ray.capacity import ClusterResources, NodeStartups, cluster_capacity, holds_one, size_of
from planner.backends.ray.spec import DEFAULT_RESOURCES, Resources, options_from_env, ray_namespace, resources_for
from planner.policy.capacity import Capacity

log = logging.getLogger(__name__)

STARTING_KILL_S = 5.0  # a retiring worker that never became ready holds no request: killed this soon
_UNREGISTERED_GRACE_S = 30.0  # a life recorded this long ago whose actor the cluster never heard of: its spawn died


class RayBackend(Observed):
    kind = "ray"

    def __init__(
        self,
        settings: Settings,
        *,
        address: str | None = None,
        resources: Mapping[str, Resources] | None = None,
        runtime_env: Mapping[str, Any] | None = None,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        grace_s: float = common.DEFAULT_GRACE_S,
        timeout_for: Callable[[str], float] | None = None,
        resource_for: Callable[[str], str] | None = None,
        startup_delay_s: float = 0.0,
        environ: Mapping[str, str] | None = None,
        max_resources: Mapping[str, float] | None = None,
    ) -> None:
        """`address`: the cluster ("HOST:PORT", "ray://HOST:PORT", "auto"; default FARM_RAY_ADDRESS, else
        RAY_ADDRESS, else "local": a cluster running on this machine, else a head of our own that ends with
        this backend); `resources` by stage queue, pipeline or resource kind (over the defaults);
        `runtime_env` Ray's, for every worker actor; `command` replaces `farm worker` on the nodes; `env`
        adds to the farm's settings; `startup_delay_s` an artificial cold start (as the local backend's);
        `max_resources` ({"GPU": 8, "CPU": 64}, default FARM_MAX_GPUS / FARM_MAX_CPUS) the most the cluster
        holds for the farm, where the autoscaler's maximum is not visible or is to be bounded."""
        source = os.environ if environ is None else environ
        from_env = options_from_env(source)
        limits = dict(max_resources if max_resources is not None else limits_from_env(source))
        startup = node_startup_from_env(source)
        super().__init__(settings, grace_s=grace_s, timeout_for=timeout_for)
        self.address = address or from_env.get("address") or source.get("RAY_ADDRESS", "").strip() or "local"
        self.resources = {**from_env.get("resources", {}), **(resources or {})}
        self.runtime_env = dict(runtime_env if runtime_env is not None else from_env.get("runtime_env", {}))
        self.command = list(command) if command else None
        self.env = {**common.worker_env(settings), **(env or {}), **common.startup_delay(startup_delay_s)}
        self.resource_for = resource_for or common.registry_resource
        self.ray_namespace = ray_namespace(self.namespace)
        self._lives_key = Keys(self.namespace).ray_lives
        self._retirements = Retirements(self._redis, self.namespace, self.kind)
        self._nodes: dict[str, str] = {}  # node id -> "ip/short id"
        self.max_resources = limits
        self._node_startups = NodeStartups(DEFAULT_NODE_STARTUP_S if startup is None else startup)
        self._joined: dict[str, float | None] = {}  # node id -> when it was first seen joining (None: there at start)
        log_path = Path(os.path.expanduser(settings.data_dir)) / "ray" / f"{self.namespace}-driver.log"
        self._bridge = Bridge(self.address, self.ray_namespace, log_path)
        try:
            self._bridge.connect()  # a wrong address fails here, at start, with its reason
        except Exception:
            self._redis.close()
            raise

    # -- the interface --------------------------------------------------------------------------

    def spawn(self, stage: str, n: int, *, request_id: str | None = None) -> list[Worker]:
        names, _ = self._asked(stage, n, request_id)
        options = resources_for(stage, self.resource_for(stage), self.resources).options()
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        with self._lock:
            known = self._records()
            alive = {a["name"] for a in self._actors() if a["state"] != "dead"}
            for name in [x for x in names if x not in known and x not in alive]:
                now = time.time()
                # recorded before it is asked for: a daemon that dies mid-spawn leaves a life to close
                record = {"stage": stage, "spawned_at": now, "placed_at": None}
                self._redis.hset(self._lives_key, name, json.dumps(record))
                try:
                    self._bridge.call("create", name=name, stage=stage, options=options,
                                      args={"env": self.env, "command": self.command})
                except Exception:
                    self._redis.hdel(self._lives_key, name)
                    raise
                self._lives.spawned(name, stage, now, placed=False)
            by_name = self._observed()
        return [by_name[x] for x in names if x in by_name]

    def capacity(self) -> Capacity:
        """The cluster's room in workers per kind, counted with each kind's resources (planner.backends.ray.capacity)."""
        with self._lock:
            workers = list(self._observed().values())
            cluster = ClusterResources.parse(self._bridge.call("resources"))
            self._note_nodes(cluster.total)
        held: dict[str, int] = {}
        for w in workers:
            if w.state in (WorkerState.STARTING, WorkerState.RUNNING):  # placed, not stopping
                try:
                    kind = self.resource_for(w.stage)
                except Exception:  # a pipeline this daemon no longer loads: its workers hold what they hold
                    continue
                held[kind] = held.get(kind, 0) + 1
        sizes = {kind: size_of(self.resources.get(kind) or DEFAULT_RESOURCES[kind]) for kind in RESOURCES}
        return cluster_capacity(cluster, sizes, held, self.max_resources, self._node_startups.seconds)

    def unplaceable(self, stages: Iterable[str]) -> set[str]:
        """The stages whose actors' resources exceed every node and node type (a label selector narrows
        further than this sees: such a stage is not named, and its workers read as waiting)."""
        cluster = ClusterResources.parse(self._bridge.call("resources"))
        out = set()
        for stage in stages:
            size = size_of(resources_for(stage, self.resource_for(stage), self.resources))
            if not holds_one(cluster, size):
                out.add(stage)
        return out

    def close(self) -> None:
        self._bridge.close()
        self._redis.close()

    @property
    def cluster_address(self) -> str:
        """The cluster's GCS address as its driver reports it: what another process passes to join it."""
        return str(self._bridge.info.get("address") or self.address)

    def nodes(self) -> dict[str, str]:
        """Node id -> how `farm status` names it ("ip/short id": nodes on one machine share an ip)."""
        with self._lock:
            self._refresh_nodes()
            return dict(self._nodes)

    # -- retiring and adopting -----------------------------------------------------------------

    def _retire(self, wanted: list[str]) -> None:
        current = {w.name: w for w in self._observe()}
        for name in wanted:
            w = current.get(name)
            if w is None or w.state is WorkerState.STOPPING:
                continue
            now = time.time()
            if w.state is WorkerState.PENDING:
                wait_s = 0.0  # never placed: it holds nothing, and room may never come
            elif w.state is WorkerState.STARTING:
                wait_s = STARTING_KILL_S
            else:
                wait_s = self.timeout_for(w.stage) + self.grace_s
            self._retirements.mark(name, now, wait_s)
            if w.state is WorkerState.PENDING:
                self._bridge.call("kill", name=name)
            else:
                self._bridge.call("retire", name=name, kill_after_s=wait_s, starting=w.state is WorkerState.STARTING)

    def _adopt(self, workers: list[Worker]) -> None:
        records, stopping = self._records(), self._retirements.all()
        now = time.time()
        for w in workers:
            self._lives.spawned(w.name, w.stage, w.spawned_at, placed=False)  # the recorder upserts by name
            placed_at = records.get(w.name, {}).get("placed_at")
            if placed_at is not None:
                self._lives.placed(w.name, w.stage, placed_at)
            if w.name in stopping and placed_at is not None:
                # the actor's own timer holds; asking again is harmless (a retiring actor ignores it)
                self._bridge.call("retire", name=w.name, kill_after_s=max(stopping[w.name]["kill_at"] - now, 0.0))

    # -- observing ------------------------------------------------------------------------------

    def _actors(self) -> list[dict[str, Any]]:
        return self._bridge.call("actors", prefix=self.namespace + ".")

    def _records(self) -> dict[str, dict[str, Any]]:
        return {k.decode(): json.loads(v) for k, v in self._redis.hgetall(self._lives_key).items()}

    def _refresh_nodes(self) -> None:
        nodes = self._bridge.call("nodes")
        for node_id, node in nodes.items():
            self._nodes[node_id] = f"{node['ip']}/{node_id[:8]}"
        self._note_nodes(nodes)

    def _note_nodes(self, node_ids) -> None:
        """When each node joined, as first seen: the nodes of the first look were there before (None)."""
        first, now = not self._joined, time.time()
        for node_id in node_ids:
            self._joined.setdefault(node_id, None if first else now)

    def _observe(self) -> list[Worker]:
        actors: dict[str, dict[str, Any]] = {}
        for a in self._actors():  # a name dead and alive again (a new life): the live one counts
            seen = actors.get(a["name"])
            if seen is None or seen["state"] == "dead":
                actors[a["name"]] = a
        records, stopping, now = self._records(), self._retirements.all(), time.time()
        for name, a in actors.items():
            if name not in records and a["state"] != "dead" and name.startswith(self.namespace + "."):
                # alive in the cluster, unknown to our records (they were lost with a Redis without persistence)
                stage = ".".join(name.split(".")[1:3])
                records[name] = {"stage": stage, "spawned_at": a["start"] or now, "placed_at": None}
                self._redis.hset(self._lives_key, name, json.dumps(records[name]))
        if any(a["node"] and a["node"] not in self._nodes for a in actors.values()):
            self._refresh_nodes()
        found: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        for name, record in records.items():
            a = actors.get(name)
            if a is None and now - record["spawned_at"] < _UNREGISTERED_GRACE_S:
                a = {"state": "pending", "node": "", "start": None}  # asked for a moment ago, not registered yet
            if a is None or a["state"] == "dead":
                self._gone(name, record, (a or {}).get("end") or now, (a or {}).get("death", ""), name in stopping)
                continue
            if a["state"] == "alive" and record.get("placed_at") is None:
                # Ray's start time: when the actor came alive (its creation on the node, under a second, is
                # not counted: the GCS table cannot tell it from waiting for room)
                record["placed_at"] = max(min(a["start"] or now, now), record["spawned_at"])
                self._redis.hset(self._lives_key, name, json.dumps(record))
                self._lives.placed(name, record["stage"], record["placed_at"])
                self._node_startups.placed(record["spawned_at"], record["placed_at"], self._joined.get(a["node"]))
            mark = stopping.get(name)
            if mark is not None and a["state"] == "alive" and now >= mark["kill_at"] + self.grace_s:
                log.warning("worker actor %s outlived its stop timeout; killing it", name)
                self._bridge.call("kill", name=name)
            found.append((name, record, a))
        self._retirements.prune(stopping, (f[0] for f in found))
        ready = self._readiness.ready({name: r["stage"] for name, r, a in found if a["state"] == "alive"})
        workers = []
        for name, record, a in sorted(found, key=lambda f: (f[1]["spawned_at"], f[0])):
            mark = stopping.get(name)
            state = state_of(stopping=mark is not None, placed=a["state"] == "alive", ready=name in ready)
            workers.append(Worker(name, record["stage"], state, record["spawned_at"], self.kind, name,
                                  ready.get(name), mark["since"] if mark else None,
                                  node=self._nodes.get(a["node"], a["node"][:8]) if a["state"] == "alive" else ""))
        return workers

    def _gone(self, name: str, record: dict[str, Any], at: float, death: str, retired: bool) -> None:
        if not retired:
            log.warning("worker actor %s ended without being retired: %s", name, death or "gone from the cluster")
        self._closed(name, record["stage"], at)
        self._redis.hdel(self._lives_key, name)
        self._retirements.drop(name)
