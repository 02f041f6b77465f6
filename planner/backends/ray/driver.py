"""The ray backend's driver process: the one process of the farm that is a Ray driver.

`python -m planner.backends.ray.driver ADDRESS RAY_NAMESPACE` connects to the cluster, says
`{"ready": {...}}` (or `{"error": why}` and exits 1), then answers one JSON request a line on stdin:

    {"id": 7, "op": "actors", "prefix": P}          -> {"id": 7, "ok": [{name, state, node, start, end, death}]}
    {"id": 8, "op": "nodes"}                        -> {"id": 8, "ok": {node_id: {ip, host, alive}}}
    {"id": 12, "op": "resources"}                   -> {"id": 12, "ok": {total, available, groups, max_resources}}
    {"id": 9, "op": "create", "name": N, "stage": S, "options": {...}, "args": {...}}
                                                    -> {"id": 9, "ok": "created" | "exists"}
    {"id": 10, "op": "retire", "name": N, "kill_after_s": 90.0, "starting": false} -> {"id": 10, "ok": true | false}
    {"id": 11, "op": "kill", "name": N}             -> {"id": 11, "ok": true | false}

Why a process of its own: a Ray driver ends its whole process when it loses the cluster's GCS ("the
program will terminate"), and the daemon must outlive a cluster that goes away (it keeps the workers it
has and tries again). The backend restarts this process when it dies. It also keeps `ray` out of every
other farm process: the core never imports it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
from typing import Any

_STATES = {"DEPENDENCIES_UNREADY": "pending", "PENDING_CREATION": "pending", "RESTARTING": "pending",
           "ALIVE": "alive", "DEAD": "dead"}


def reachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why a `host:port` GCS address cannot be reached (None: it can, or it is not such an address).
    Ray itself retries an unreachable GCS for a minute before it gives up; a typo should fail at once."""
    if address in ("", "auto", "local") or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return f"the Ray address {address!r} is not HOST:PORT, ray://HOST:PORT or auto"
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return f"no Ray cluster answers at {address} ({exc}); start one (`ray start --head`) or fix --ray-address"
    return None


class Driver:
    def __init__(self, namespace: str) -> None:
        import ray

        from planner.backends.ray.actor import StageWorkerActor

        self.ray = ray
        self.namespace = namespace
        self.actor_class = ray.remote(max_concurrency=4)(StageWorkerActor)

    def actors(self, prefix: str) -> list[dict[str, Any]]:
        """The worker actors whose names start with `prefix` (a farm's workers: `<namespace>.`), dead ones too."""
        from ray._private import state  # the GCS actor table: the public state API needs the dashboard

        out = []
        for actor in state.actors().values():
            name = actor.get("Name") or ""
            if not name.startswith(prefix) or actor.get("ActorClassName") != "StageWorkerActor":
                continue
            death = actor.get("DeathCause") or ""
            found = re.search(r'error_message: "((?:[^"\\]|\\.)*)"', str(death))
            out.append({
                "name": actor["Name"],
                "state": _STATES.get(actor.get("State"), "pending"),
                "node": (actor.get("Address") or {}).get("NodeID") or "",
                "start": (actor.get("StartTime") or 0) / 1000.0 or None,
                "end": (actor.get("EndTime") or 0) / 1000.0 or None,
                "death": (found.group(1) if found else str(death))[:300],
            })
        return out

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["NodeID"]: {"ip": n.get("NodeManagerAddress", ""), "host": n.get("NodeManagerHostname", ""),
                              "alive": bool(n.get("Alive"))} for n in self.ray.nodes()}

    def resources(self) -> dict[str, Any]:
        """The live nodes' resources (total and free now) and, where the autoscaler's config is in the GCS
        (autoscaler v2, KubeRay), its node groups (resources, max_count) and cluster-wide maximum."""
        from ray._private import state

        groups: list[dict[str, Any]] = []
        max_resources: dict[str, float] = {}
        try:
            config = state.state.get_cluster_config()
        except Exception:  # an older GCS without the key: no autoscaler visible
            config = None
        if config is not None:
            groups = [{"resources": dict(g.resources), "max_count": int(g.max_count)} for g in config.node_group_configs]
            max_resources = dict(config.max_resources)
        return {"total": state.total_resources_per_node(), "available": state.available_resources_per_node(),
                "groups": groups, "max_resources": max_resources}

    def create(self, name: str, stage: str, options: dict[str, Any], args: dict[str, Any]) -> str:
        try:
            self.ray.get_actor(name, namespace=self.namespace)
            return "exists"
        except ValueError:
            pass
        try:
            self.actor_class.options(name=name, namespace=self.namespace, lifetime="detached", max_restarts=0,
                                     **options).remote(name=name, stage=stage, **args)
        except ValueError as exc:
            if "already" in str(exc):  # another driver created it meanwhile
                return "exists"
            raise
        return "created"

    def retire(self, name: str, kill_after_s: float, starting: bool = False) -> bool:
        handle = self._handle(name)
        if handle is None:
            return False
        handle.retire.remote(kill_after_s, starting)
        return True

    def kill(self, name: str) -> bool:
        handle = self._handle(name)
        if handle is None:
            return False
        self.ray.kill(handle, no_restart=True)
        return True

    def _handle(self, name: str):
        try:
            return self.ray.get_actor(name, namespace=self.namespace)
        except ValueError:  # gone already
            return None


_ANSWERS: list[Any] = []  # the protocol's stream: this process's original stdout


def _say(message: dict[str, Any]) -> None:
    out = _ANSWERS[0] if _ANSWERS else sys.stdout
    out.write(json.dumps(message) + "\n")
    out.flush()


def _keep_stdout_for_answers() -> None:
    """Answers go to the original stdout; everything else written to fd 1 (Ray prints its raylets'
    warnings there, whatever `log_to_driver` says) goes to stderr, the driver's log."""
    _ANSWERS.append(os.fdopen(os.dup(1), "w", buffering=1))
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def main(argv: list[str]) -> int:
    address, namespace = argv[0], argv[1]
    _keep_stdout_for_answers()
    why = reachable(address)
    if why:
        _say({"error": why})
        return 1
    try:
        import ray

        started = time.monotonic()
        # "local": a head of our own on this machine (farm up's embedded cluster), ending with this process
        ray.init(address=None if address == "local" else address, namespace=namespace,
                 logging_level="WARNING", log_to_driver=False, configure_logging=False)
        driver = Driver(namespace)
        context = ray.get_runtime_context()
        _say({"ready": {"address": context.gcs_address, "node": context.get_node_id(),
                        "connect_s": round(time.monotonic() - started, 3)}})
    except Exception as exc:
        _say({"error": f"could not connect to the Ray cluster at {address!r}: {exc}"})
        return 1
    for line in sys.stdin:
        try:
            request = json.loads(line)
            op = request.pop("op")
            rid = request.pop("id")
        except (ValueError, KeyError, AttributeError):
            _say({"error": f"not a request: {line[:200]!r}"})
            continue
        try:
            _say({"id": rid, "ok": getattr(driver, op)(**request)})
        except Exception as exc:  # one failed call fails alone; the driver keeps serving
            _say({"id": rid, "error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
