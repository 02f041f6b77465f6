"""The local backend: each worker a `farm worker` process on this machine (the embedded default).

By default the workers are forked by a launcher process (planner.backends.local.launcher) that has imported
what a worker needs once: the same `farm worker`, in a session of its own, ready in about a third of the
CPU of a fresh interpreter (0.2 instead of 0.6 CPU-seconds; a burst of 12 on two cores is ready in 1 s
instead of 3 s). The launcher reaps them and reports each exit as it happens, so a worker's life ends
at its real exit. With `command` (or FARM_WORKER_LAUNCHER=0) each worker is exec'd instead.

Every worker has a process record, `<data_dir>/workers/<namespace>/<name>.json` (pid, the process's
start time, stage, spawn time, retirement), written before the process starts and updated after, so a
restarted daemon re-adopts its workers and a recycled pid (same number, other start time) is never
taken for one of them, nor signalled. Workers run in their own session: a Ctrl-C or a `kill -9` of the
daemon leaves them serving, and the next daemon finds them; unless they are tethered (`farm up`'s, which
serve a Redis that dies with it): those end with the process that started them.

Retiring a worker that is still starting: a SIGTERM can land before Celery has installed its handler
(the process dies at once: fine) or while its start-up is under way, so the backend repeats SIGTERM
every TERM_REPEAT_S while the worker is not ready, and kills its process group STARTING_KILL_S after
the first one if it never became ready: a worker that never announced itself ready never took a
request, so it holds nothing. A ready worker keeps the warm shutdown: it is killed only after its
stage's timeout plus the grace.

Capacity: none by default. Its workers are processes that hold no device (a GPU stage's worker sees
every GPU of the host) and share the host's cores by design (they wait on programs and judges more than
they compute), so only the operator's FARM_MAX_GPUS / FARM_MAX_CPUS bound them, read with one core per
CPU worker, one GPU per GPU worker and a quarter of a core per I/O worker (planner.backends.capacity).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from farm.config import Settings
from farm.processes import (TETHER_ENV, find_by_cmdline, group_members, nice_session, popen_tethered, process_start,
                            python, worker_nice)
from farm.worker_records import Records
from planner.backends import BackendError, Worker, common
from planner.backends.capacity import LOCAL_SIZES, limited, limits_from_env
from planner.backends.lifecycle import Observed, state_of
from planner.backends.local.launcher import Launcher, LauncherError
from planner.policy.capacity import Capacity

log = logging.getLogger(__name__)

_UNSTARTED_GRACE_S = 30.0  # a record without a pid this old belongs to a daemon that died mid-spawn
TERM_REPEAT_S = 1.0  # a retiring worker that is not ready yet is sent SIGTERM again this often
STARTING_KILL_S = 5.0  # a retiring worker that never became ready is killed this long after its SIGTERM


def default_command() -> list[str]:
    """`farm worker` of the Python running this backend (a venv's script, else the module itself)."""
    script = Path(sys.executable).with_name("farm")
    if script.exists():
        return [str(script), "worker"]
    return python("-c", "import sys; from farm.app.cli import main; sys.argv[0] = 'farm'; main()", "worker")


class LocalBackend(Observed):
    kind = "local"

    def __init__(
        self,
        settings: Settings,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        grace_s: float = common.DEFAULT_GRACE_S,
        timeout_for: Callable[[str], float] | None = None,
        state_dir: str | os.PathLike | None = None,
        nice: int | None = None,
        launcher: bool | None = None,
        events: bool | None = None,
        startup_delay_s: float = 0.0,
        tether: bool | None = None,
        max_resources: Mapping[str, float] | None = None,
    ) -> None:
        """`command` replaces `farm worker` (the backend appends `--stage S --name N`); `env` adds to the
        environment the workers inherit; `timeout_for(stage)` is the live stage timeout (the knobs');
        `nice` (0-19, default FARM_WORKER_NICE or 0) lowers the workers' CPU priority below the farm's
        own processes on this machine (Redis, the daemon, the recorder, trainers replayed here);
        `launcher` (default: unless `command` is given or FARM_WORKER_LAUNCHER=0) forks each `farm worker`
        from a launcher process that has its imports done (planner.backends.local.launcher) instead of exec'ing
        a fresh interpreter: the same worker, ready in a fraction of the CPU; `events` (default: unless
        FARM_WORKER_EVENTS=0) has the workers send Celery's task events, which Flower shows (a farm without
        Flower saves their cost, about a millisecond of CPU per request and stage); `startup_delay_s`
        delays each worker's start by that long (an artificial cold start, as containers and GPU workers
        have: FARM_WORKER_STARTUP_DELAY_S, workers.process.startup_delay); `tether` (default: FARM_WORKER_TETHER=1)
        has every worker end with the process that started it (this one, or its launcher, which ends with
        this one): a `kill -9` of `farm up` then takes its workers along, where a daemon's workers otherwise
        outlive it to be adopted by the next (Linux; elsewhere the next `farm up` ends what is left);
        `max_resources` ({"GPU": 2, "CPU": 8}, default FARM_MAX_GPUS / FARM_MAX_CPUS) bounds its capacity."""
        super().__init__(settings, grace_s=grace_s, timeout_for=timeout_for)
        self.command = list(command) if command else default_command()
        self.extra_env = {**(env or {}), **common.startup_delay(startup_delay_s)}
        self.nice = worker_nice(nice)
        self.max_resources = dict(max_resources if max_resources is not None else limits_from_env(os.environ))
        if events is None:
            events = os.environ.get("FARM_WORKER_EVENTS", "1").strip() not in ("0", "")
        self.events = bool(events)
        if tether is None:
            tether = os.environ.get(TETHER_ENV, "").strip() not in ("0", "")
        self.tether = bool(tether)
        root = Path(state_dir) if state_dir else Path(os.path.expanduser(settings.data_dir)) / "workers"
        self.dir = root / self.namespace
        self._records = Records(self.dir)
        self._exited: dict[str, float] = {}  # children of this backend that exited -> when
        self._term_sent: dict[str, float] = {}  # retiring workers -> when they were last sent SIGTERM
        if launcher is None:
            launcher = command is None and os.environ.get("FARM_WORKER_LAUNCHER", "1").strip() not in ("0", "")
        self._launcher = Launcher(self.dir / "launcher.log", self._launched_exit) if launcher else None
        self._launched: dict[int, str] = {}  # pid -> name of the workers our launcher forked

    # -- the interface --------------------------------------------------------------------------

    def spawn(self, stage: str, n: int, *, request_id: str | None = None) -> list[Worker]:
        names, _ = self._asked(stage, n, request_id)
        with self._lock:
            self.dir.mkdir(parents=True, exist_ok=True)
            for name in names:
                if not self._records.exists(name):
                    self._start(name, stage)
            by_name = self._observed()
        return [by_name[name] for name in names if name in by_name]

    def capacity(self) -> Capacity:
        return limited(LOCAL_SIZES, self.max_resources)

    def reconcile(self) -> list[Worker]:
        if self._launcher is not None:
            self._launcher.start()  # its imports overlap with the daemon's own start, not with a first spawn
        return super().reconcile()

    def close(self) -> None:
        if self._launcher is not None:
            self._launcher.close()  # the workers it forked run on, in their own sessions
        self._redis.close()

    # -- processes ------------------------------------------------------------------------------

    def _retire(self, wanted: list[str]) -> None:
        now = time.time()
        for name in wanted:
            record = self._records.load(name)
            if record is None or record.get("stopping_since") is not None or record.get("pid") is None:
                continue
            if process_start(record["pid"]) != record["start"]:
                continue  # already gone; the next observation reaps it
            record["stopping_since"] = now
            record["kill_at"] = now + self.timeout_for(record["stage"]) + self.grace_s
            self._records.save(record)
            self._term(record, now)  # warm shutdown: the current request finishes

    def _start(self, name: str, stage: str) -> None:
        record = {"name": name, "stage": stage, "spawned_at": time.time(), "pid": None, "start": None,
                  "stopping_since": None, "kill_at": None}
        self._records.save(record)  # first: a daemon dying between fork and record still leaves a trace
        farm_env = {**common.worker_env(self.settings), "FARM_DATA_DIR": self.settings.data_dir, **self.extra_env}
        if self._launcher is not None:
            try:
                pid = self._launcher.spawn(name, stage, log=self._records.log_path(name),
                                           pidfile=self._records.pid_path(name), env=farm_env, nice=self.nice,
                                           events=self.events, tether=self.tether)
            except LauncherError as exc:
                self._records.remove(name)
                raise BackendError(f"could not start worker {name}: {exc}") from exc
            self._launched[pid] = name
            record["pid"], record["start"] = pid, process_start(pid)
            self._records.save(record)
            self._lives.spawned(name, stage, record["spawned_at"])
            return
        env = {**os.environ, **farm_env, "FARM_WORKER_EVENTS": "1" if self.events else "0"}  # `farm worker --events`
        cmd = [*self.command, "--stage", stage, "--name", name]
        if self.nice:
            cmd = ["nice", "-n", str(self.nice), *cmd]  # nice execs the worker: same pid, same start time
        try:
            with open(self._records.log_path(name), "ab") as out:
                spawn = popen_tethered if self.tether else subprocess.Popen
                proc = spawn(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, close_fds=True)
        except OSError as exc:
            self._records.remove(name)
            raise BackendError(f"could not start worker {name} ({' '.join(cmd)}): {exc}") from exc
        if self.nice:
            nice_session(proc.pid, self.nice)
        record["pid"], record["start"] = proc.pid, process_start(proc.pid)
        self._records.save(record)
        threading.Thread(target=self._reap, args=(name, proc), name=f"reap-{name}", daemon=True).start()
        self._lives.spawned(name, stage, record["spawned_at"])

    def _launched_exit(self, pid: int, at: float) -> None:
        name = self._launched.pop(pid, None)
        if name is not None:
            self._exited[name] = at

    def _reap(self, name: str, proc: subprocess.Popen) -> None:
        """Wait for a child so it leaves no zombie, and note when it exited (exact lifetimes)."""
        proc.wait()
        self._exited[name] = time.time()

    def _observe(self) -> list[Worker]:
        """The records against the processes: reap the gone, kill the overdue, read readiness."""
        now = time.time()
        alive: list[dict] = []
        for record in self._records.all():
            if record.get("pid") is None:
                if not self._adopt_unstarted(record, now):
                    continue
            if process_start(record["pid"]) != record["start"]:
                self._gone(record, now)
                continue
            if record.get("kill_at") is not None and now >= record["kill_at"]:
                log.warning("worker %s outlived its stage timeout plus %.0f s of grace; killing it", record["name"],
                            self.grace_s)
                self._kill(record, now)
            alive.append(record)
        ready = self._readiness.ready({r["name"]: r["stage"] for r in alive})
        for r in alive:
            if r.get("stopping_since") is not None and r["name"] not in ready and not r.get("killed_at"):
                self._stop_starting(r, now)
        workers = []
        for r in sorted(alive, key=lambda r: (r["spawned_at"], r["name"])):
            state = state_of(stopping=r.get("stopping_since") is not None, ready=r["name"] in ready)
            workers.append(Worker(r["name"], r["stage"], state, r["spawned_at"], self.kind, str(r["pid"]),
                                  ready.get(r["name"]), r.get("stopping_since")))
        return workers

    def _adopt_unstarted(self, record: dict, now: float) -> bool:
        """A record a daemon wrote before its process started: find the process, or drop the record."""
        if now - record["spawned_at"] < _UNSTARTED_GRACE_S:
            return False  # another backend may be starting it right now
        pid = self._records.written_pid(record["name"]) or find_by_cmdline(record["name"])
        start = process_start(pid) if pid is not None else None
        if start is None:
            self._records.remove(record["name"])
            return False
        record["pid"], record["start"] = pid, start
        self._records.save(record)
        return True

    def _gone(self, record: dict, now: float) -> None:
        name = record["name"]
        self._records.pid_path(name).unlink(missing_ok=True)
        # the worker's leader is gone; what is left of its process group (a pool child busy with a request)
        # goes too. Only while no process holds the leader's pid: a recycled pid may lead a group of its own,
        # but no pid is reused while a group of that id still has members, so then they are the worker's.
        if process_start(record["pid"]) is None and group_members(record["pid"]):
            try:
                os.killpg(record["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._closed(name, record["stage"], self._exited.pop(name, None) or now)
        self._records.remove(name)
        self._term_sent.pop(name, None)
        if record.get("killed_at"):
            log.warning("worker %s (pid %s) had to be killed after its retirement; its log: %s", name,
                        record["pid"], self._records.log_path(name))
        elif record.get("stopping_since") is not None:
            self._records.log_path(name).unlink(missing_ok=True)
        else:  # it died without being asked to: keep its log for whoever investigates
            log.warning("worker %s (pid %s) exited without being retired; its log: %s", name, record["pid"],
                        self._records.log_path(name))

    def _term(self, record: dict, now: float) -> None:
        self._term_sent[record["name"]] = now
        try:
            os.kill(record["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass

    def _stop_starting(self, record: dict, now: float) -> None:
        """A retiring worker not ready yet: SIGTERM again (one sent during its start-up may have come
        before Celery could act on it), and a kill once it has had STARTING_KILL_S to go."""
        if now - record["stopping_since"] >= STARTING_KILL_S:
            log.info("worker %s was retired while starting and is still starting %.0f s later; killing it "
                     "(it never took a request)", record["name"], now - record["stopping_since"])
            self._kill(record, now)
        elif now - self._term_sent.get(record["name"], record["stopping_since"]) >= TERM_REPEAT_S:
            self._term(record, now)

    def _kill(self, record: dict, now: float) -> None:
        # the leader is verified alive (same start time), so its process group is still the worker's
        if not record.get("killed_at"):
            record["killed_at"] = now
            self._records.save(record)  # its log is kept: a worker that had to be killed is worth a look
        try:
            os.killpg(record["pid"], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
