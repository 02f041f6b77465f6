"""One stage worker as a Ray actor: the actor holds the worker's resources on its node and runs
`farm worker --stage S --name N` as its child process.

A child, not the actor's own process, because a Celery worker wants what a Ray actor process does not
give it: the main thread and its signals (a warm shutdown is SIGTERM: finish the current request, then
exit), and a process it may fork from for the sandbox. The child inherits the actor's environment, so
it sees exactly the GPU Ray assigned (CUDA_VISIBLE_DEVICES); it is tethered with SIGKILL, so when the
actor dies (its node is lost, or the cluster kills it) the worker dies with it, and the farm's lease on
its request returns the request to the queue. When the worker exits for any reason, the actor exits
too: its resources go back to the cluster and its name is free.

The actor is detached (it outlives the daemon that asked for it) and never restarted by Ray: a worker
that died is replaced by the planner's next decision, as on every backend.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Mapping, Sequence

from farm.processes import die_with_parent

log = logging.getLogger(__name__)

TERM_REPEAT_S = 1.0  # a retiring worker still starting may miss one SIGTERM (no handler installed yet)


class StageWorkerActor:
    """Used through `ray.remote(max_concurrency=4)(StageWorkerActor)`: `retire` runs beside the watcher."""

    def __init__(self, *, name: str, stage: str, env: Mapping[str, str], command: Sequence[str] | None = None) -> None:
        """`command` replaces `farm worker` of this node's Python (the backend appends `--stage S --name N`)."""
        self.name = name
        self._retiring = threading.Event()
        argv = list(command) if command else [sys.executable, "-m", "farm.app.cli", "worker"]
        self.proc = subprocess.Popen(
            [*argv, "--stage", stage, "--name", name], env={**os.environ, **env},
            start_new_session=True, preexec_fn=die_with_parent(signal.SIGKILL),
            stdin=subprocess.DEVNULL,
        )
        import ray

        self._me = ray.get_runtime_context().current_actor
        threading.Thread(target=self._watch, name=f"watch-{name}", daemon=True).start()

    def where(self) -> dict:
        import ray

        context = ray.get_runtime_context()
        return {"node": context.get_node_id(), "pid": self.proc.pid,
                "gpus": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def retire(self, kill_after_s: float, starting: bool = False) -> bool:
        """Warm shutdown: SIGTERM now, SIGKILL of its process group once `kill_after_s` has passed. The
        timer lives here, so it holds even if the daemon dies. A worker still `starting` is sent SIGTERM
        again every second: one that lands before Celery installs its handler may be lost."""
        if self._retiring.is_set():
            return False
        self._retiring.set()
        deadline = time.monotonic() + float(kill_after_s)
        self._signal(signal.SIGTERM)
        while self.proc.poll() is None:
            if time.monotonic() >= deadline:
                log.warning("worker %s outlived its stop timeout; killing it", self.name)
                self._signal(signal.SIGKILL)
                break
            if starting:
                self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=min(TERM_REPEAT_S, max(0.0, deadline - time.monotonic())) or 0.01)
            except subprocess.TimeoutExpired:
                pass
        return True

    def _signal(self, signum: int) -> None:
        try:  # the kill takes the worker's whole session (its sandboxes); SIGTERM is the worker's alone
            if signum == signal.SIGKILL:
                os.killpg(self.proc.pid, signum)
            else:
                self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def _watch(self) -> None:
        code = self.proc.wait()
        if not self._retiring.is_set():
            log.warning("worker %s exited on its own with status %s", self.name, code)
        self._me._exit.remote()  # runs in the actor's task threads, where exit_actor may be called

    def _exit(self) -> None:
        import ray

        ray.actor.exit_actor()
