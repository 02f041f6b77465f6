"""The docker backend: each worker a container running `farm worker`, through the `docker` SDK.

Containers carry labels (`farm.namespace`, `farm.stage`, `farm.worker`, `farm.spawned_at`, and
`farm.gpu` for a GPU worker): the labels are the records, so a restarted daemon re-adopts exactly the
containers of its farm. Each container gets the limits of its stage (by queue, else by resource kind),
a stage of resource `gpu` one GPU through a device request (a distinct one when `gpu_ids` are given;
limits with `gpus=0` for it run it without, as a synthetic replay on a machine without GPUs does),
and the farm's settings as environment. A retired container is stopped with the stage's timeout plus
a grace as its stop timeout, so the engine itself escalates to SIGKILL only then, even if the daemon
dies meanwhile; which containers are stopping is kept in Redis (`<namespace>:docker:stopping`).
Exited containers are kept until observed, so the end of a life is measured, then removed.

Capacity: GPU workers that hold a GPU are as many as the GPUs it hands out (`gpu_ids`), else as the
NVIDIA devices this process sees (/dev/nvidia0...: the engine's host, where the daemon runs beside it;
in a container without them, none is seen and the GPU kind is unbounded unless FARM_MAX_GPUS says it).
Cores bound nothing by default (a container's `cpus` is a ceiling, not a reservation); FARM_MAX_CPUS
does, read with each kind's `cpus` (one core where a kind has none).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import docker.errors

from farm.config import Settings
from farm.pipeline import RESOURCES
from planner.backends import BackendError, Worker, WorkerState, common
from planner.backends.capacity import CPU, GPU, limited, limits_from_env
from planner.backends.lifecycle import Observed, Retirements, state_of
from planner.backends.docker.spec import (DEFAULT_LIMITS, LABEL, SYSTEM_PATHS_UNCONFINED, Limits, container_spec,
                                          engine_time, host_config, options_from_env)
from planner.policy.capacity import Capacity

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "reward-farm-worker:latest"
DEFAULT_GPU_IMAGE = "reward-farm-worker-cuda:latest"
_ALIVE = ("created", "running", "restarting", "paused")
_PARALLEL_STARTS = 8  # containers created and started at once by one spawn
_UNSTARTED_GRACE_S = 30.0  # a container created but never started this long ago: its daemon died mid-spawn


def host_gpus() -> int:
    """The NVIDIA GPUs this process sees (/dev/nvidia0, /dev/nvidia1, ...)."""
    return len(glob.glob("/dev/nvidia[0-9]*"))


class DockerBackend(Observed):
    kind = "docker"

    def __init__(
        self,
        settings: Settings,
        *,
        image: str | None = None,
        gpu_image: str | None = None,
        images: Mapping[str, str] | None = None,
        network: str | None = None,
        limits: Mapping[str, Limits] | None = None,
        command: Sequence[str] = ("farm", "worker"),
        env: Mapping[str, str] | None = None,
        volumes: Mapping[str, Any] | None = None,
        gpu_ids: Sequence[str] | None = None,
        cap_add: Sequence[str] = ("SYS_ADMIN",),
        security_opt: Sequence[str] = ("apparmor=unconfined", "seccomp=unconfined", SYSTEM_PATHS_UNCONFINED),
        init: bool = True,
        grace_s: float = common.DEFAULT_GRACE_S,
        timeout_for: Callable[[str], float] | None = None,
        resource_for: Callable[[str], str] | None = None,
        client: Any = None,
        environ: Mapping[str, str] | None = None,
        max_resources: Mapping[str, float] | None = None,
        gpus_seen: Callable[[], int] = host_gpus,
    ) -> None:
        """`image` for CPU and I/O stages, `gpu_image` for GPU stages, `images` by pipeline or stage queue
        over both (the cuda pipeline compiles with nvcc, so its CPU stage wants the CUDA image too);
        `limits` by stage queue or resource kind (over DEFAULT_LIMITS); `volumes` as the SDK takes them
        (`{"/host": {"bind": "/in", "mode": "ro"}}`); `gpu_ids` the GPUs to hand out, one per GPU worker;
        `network` "host" or a network name (compose's); `env` adds to the farm's settings. What is not
        given comes from FARM_DOCKER_* in `environ` (default: os.environ), then the defaults here.
        `cap_add`/`security_opt`: the worker's sandbox (workers/sandbox/) runs bubblewrap, which makes user, mount
        and PID namespaces, pivots into a new root and mounts a /proc there (the engine's default seccomp profile
        refuses pivot_root, and its masked /proc paths make the kernel refuse a new /proc in a user namespace),
        and gives each run a cgroup (the worker remounts its container's cgroup subtree writable).
        `max_resources` ({"GPU": 2, "CPU": 8}, default FARM_MAX_GPUS / FARM_MAX_CPUS) bounds its capacity;
        `gpus_seen` counts the host's GPUs (the NVIDIA devices here)."""
        source = os.environ if environ is None else environ
        from_env = options_from_env(source)
        limits_here = dict(max_resources if max_resources is not None else limits_from_env(source))
        super().__init__(settings, grace_s=grace_s, timeout_for=timeout_for)
        self.image = image or from_env.get("image", DEFAULT_IMAGE)
        self.gpu_image = gpu_image or from_env.get("gpu_image", DEFAULT_GPU_IMAGE)
        self.images = {**from_env.get("images", {}), **(images or {})}
        self.network = network or from_env.get("network", "host")
        self.limits = {**DEFAULT_LIMITS, **from_env.get("limits", {}), **(limits or {})}
        self.command = list(command)
        self.env = {**common.worker_env(settings), **(env or {})}
        self.volumes = dict(volumes or {})
        gpu_ids = gpu_ids if gpu_ids is not None else from_env.get("gpu_ids")
        self.gpu_ids = [str(g) for g in gpu_ids] if gpu_ids else None
        self.cap_add, self.security_opt = list(cap_add), list(security_opt)
        self.init = init
        self.resource_for = resource_for or common.registry_resource
        self.max_resources = limits_here
        self._gpus_seen = gpus_seen
        if client is None:
            try:
                client = docker.from_env()
                client.ping()
            except Exception as exc:
                raise BackendError(f"no Docker engine answers ({exc}); "
                                   "start one (docker/ci-engine.sh on a test machine)") from exc
        self._docker = client
        self._retirements = Retirements(self._redis, self.namespace, self.kind)

    # -- the interface --------------------------------------------------------------------------

    def spawn(self, stage: str, n: int, *, request_id: str | None = None) -> list[Worker]:
        names, timeout_s = self._asked(stage, n, request_id)
        resource = self.resource_for(stage)
        limits = self.limits.get(stage) or self.limits.get(resource) or Limits()
        # Every worker of the call is spawned when it was asked for, not when its container's turn came:
        # creating containers takes the engine seconds under load, and a pool counts a worker (and pays
        # for it) from the planner's request, so its start-up is measured from there too.
        asked_at = time.time()
        # Containers are created outside the lock, so that the daemon's spawns of several stages run side
        # by side (a name created twice answers 409, and `_start` takes that as done); a GPU stage holds
        # the lock throughout, since its GPUs are free until its containers carry them.
        with self._lock if limits.gpus else contextlib.nullcontext():
            with self._lock:
                existing = {c["Labels"].get(f"{LABEL}.worker") for c in self._containers()}
            missing = [name for name in names if name not in existing]
            gpus = self._free_gpus(len(missing)) if limits.gpus else [None] * len(missing)
            # the engine creates and starts containers in parallel well: a decision's new workers start together
            with ThreadPoolExecutor(max_workers=max(1, min(_PARALLEL_STARTS, len(missing)))) as pool:
                futures = [pool.submit(self._start, name, stage, limits, timeout_s, gpu, asked_at)
                           for name, gpu in zip(missing, gpus)]
            errors = [f.exception() for f in futures if f.exception() is not None]
        by_name = self._observed()
        if errors:
            raise errors[0]
        return [by_name[x] for x in names if x in by_name]

    def capacity(self) -> Capacity:
        """Per kind, what the limits allow: FARM_MAX_* and the GPUs there are to hand out."""
        sizes = {kind: {CPU: lim.cpus or 1.0, GPU: float(lim.gpus)} for kind, lim in self.limits.items()
                 if kind in RESOURCES}
        limits = dict(self.max_resources)
        gpus = len(self.gpu_ids) if self.gpu_ids is not None else self._gpus_seen()
        if self.gpu_ids is not None or gpus:  # none seen and none given: no limit this process can see
            limits[GPU] = min(limits.get(GPU, gpus), gpus)
        return limited(sizes, limits)

    def close(self) -> None:
        self._redis.close()
        self._docker.close()

    # -- containers -----------------------------------------------------------------------------

    def _containers(self) -> list[dict]:
        filters = {"label": [f"{LABEL}.namespace={self.namespace}", f"{LABEL}.backend=docker"]}
        return self._docker.api.containers(all=True, filters=filters)

    def _free_gpus(self, n: int) -> list[str | None]:
        """A distinct free GPU for each of `n` new GPU workers (None each: the runtime picks, when no ids are given)."""
        if self.gpu_ids is None:
            return [None] * n
        held = {c["Labels"].get(f"{LABEL}.gpu") for c in self._docker.api.containers(filters={"label": f"{LABEL}.gpu"})}
        free = [gpu for gpu in self.gpu_ids if gpu not in held]
        if len(free) < n:
            raise BackendError(f"{n} GPU worker(s) asked for, but only {len(free)} of the docker backend's GPUs "
                               f"({', '.join(self.gpu_ids)}) are free: every GPU holds at most one worker")
        return free[:n]

    def image_for(self, stage: str, limits: Limits) -> str:
        pipeline = stage.partition(".")[0]
        return self.images.get(stage) or self.images.get(pipeline) or (self.gpu_image if limits.gpus else self.image)

    def _start(self, name: str, stage: str, limits: Limits, timeout_s: float, gpu_id: str | None,
               spawned_at: float) -> None:
        create, host = container_spec(
            name=name, stage=stage, namespace=self.namespace,
            image=self.image_for(stage, limits), command=self.command, env=self.env,
            network=self.network, limits=limits, spawned_at=spawned_at,
            stop_timeout_s=timeout_s + self.grace_s, volumes=self.volumes,
            gpu_id=gpu_id, init=self.init,
            cap_add=self.cap_add, security_opt=self.security_opt,
        )
        api = self._docker.api
        try:
            container = api.create_container(**create, host_config=host_config(api, host))["Id"]
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # a retried spawn raced another: the worker exists
                return
            raise BackendError(f"could not create worker container {name} from image {create['image']!r}: "
                               f"{exc.explanation or exc}") from exc
        try:
            api.start(container)
        except docker.errors.APIError as exc:
            self._discard(container, name)
            raise BackendError(f"could not start worker container {name}: {exc.explanation or exc}") from exc
        self._lives.spawned(name, stage, spawned_at)

    def _retire(self, wanted: list[str]) -> None:
        now = time.time()
        containers = {c["Labels"].get(f"{LABEL}.worker"): c for c in self._containers()}
        stopping = self._retirements.all()
        for name in wanted:
            c = containers.get(name)
            if c is None or name in stopping or c["State"] not in _ALIVE:
                continue
            wait_s = self.timeout_for(c["Labels"][f"{LABEL}.stage"]) + self.grace_s
            self._retirements.mark(name, now, wait_s)
            self._stop_async(c["Id"], name, wait_s)

    def _adopt(self, workers: list[Worker]) -> None:
        super()._adopt(workers)
        ids = {c["Labels"].get(f"{LABEL}.worker"): c["Id"] for c in self._containers()}
        stopping = self._retirements.all()
        now = time.time()
        for w in workers:
            if w.state is WorkerState.STOPPING and w.name in ids:
                # the previous daemon's stop call died with it: ask again for the time that is left
                self._stop_async(ids[w.name], w.name, max(stopping[w.name]["kill_at"] - now, 0.0))

    def _stop_async(self, container_id: str, name: str, wait_s: float) -> None:
        """`docker stop` with the stage's timeout + grace, off the caller's thread (it can take minutes)."""

        def stop() -> None:
            try:
                self._docker.api.stop(container_id, timeout=int(math.ceil(wait_s)))
            except Exception as exc:  # gone already, or the engine is away: the next observation decides
                log.info("stopping worker container %s: %s", name, exc)

        threading.Thread(target=stop, name=f"stop-{name}", daemon=True).start()

    def _observe(self) -> list[Worker]:
        now = time.time()
        stopping = self._retirements.all()
        alive: list[tuple[dict, str, str, float]] = []
        for c in self._containers():
            labels = c["Labels"]
            name, stage = labels.get(f"{LABEL}.worker"), labels.get(f"{LABEL}.stage")
            if not name or not stage:
                continue
            spawned_at = float(labels.get(f"{LABEL}.spawned_at", 0.0))
            state = c["State"]
            if state in ("exited", "dead"):
                self._gone(c, name, stage, now)
                continue
            if state == "removing":
                continue
            if state == "created" and now - spawned_at > _UNSTARTED_GRACE_S:
                self._discard(c["Id"], name)  # never started, never announced
                continue
            mark = stopping.get(name)
            if mark is not None and now >= mark["kill_at"] + self.grace_s:
                log.warning("worker container %s outlived its stop timeout; killing it", name)
                self._kill(c["Id"])
            alive.append((c, name, stage, spawned_at))
        self._retirements.prune(stopping, (a[1] for a in alive))
        ready = self._readiness.ready({name: stage for _, name, stage, _ in alive})
        workers = []
        for c, name, stage, spawned_at in sorted(alive, key=lambda a: (a[3], a[1])):
            mark = stopping.get(name)
            state = state_of(stopping=mark is not None, ready=name in ready)
            workers.append(Worker(name, stage, state, spawned_at, self.kind, c["Id"][:12], ready.get(name),
                                  mark["since"] if mark else None))
        return workers

    def _gone(self, c: dict, name: str, stage: str, now: float) -> None:
        try:
            finished = engine_time(self._docker.api.inspect_container(c["Id"])["State"].get("FinishedAt"))
        except docker.errors.NotFound:
            return  # someone removed it meanwhile; whoever did saw it go
        if name not in self._retirements.all():
            tail = self._docker.api.logs(c["Id"], tail=20).decode(errors="replace")
            log.warning("worker container %s exited without being retired; its last output:\n%s", name, tail)
        self._closed(name, stage, finished or now)
        self._retirements.drop(name)
        self._discard(c["Id"], name)

    def _discard(self, container_id: str, name: str) -> None:
        try:
            self._docker.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            log.warning("could not remove the container of worker %s: %s", name, exc)

    def _kill(self, container_id: str) -> None:
        try:
            self._docker.api.kill(container_id)
        except docker.errors.APIError:
            pass
