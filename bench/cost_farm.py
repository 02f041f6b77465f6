"""The farm bench/cost.py measures: `farm up` and one `farm gateway` on a data dir of their own, a tenant, and
where each of their processes' CPU goes (bench.proc_cpu)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import proc_cpu
from bench.cpu_groups import CpuGroups, available
from bench.dispatch import gateway_serving
from bench.proc_cpu import Placed
from farm.processes import Started, popen_tethered

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = ("run_code", "math")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(argv: list[str], **kwargs) -> subprocess.Popen:
    """A farm process or server of the bench: in a session of its own, so that a Ctrl-C in the terminal reaches the
    bench only, which stops them in order; and tethered to the bench (farm.processes.popen_tethered): no signal to
    the bench reaches their session, so however the bench dies (a `timeout`, a `kill -9`) they are sent SIGTERM
    then, and no leftover farm skews later measurements."""
    return popen_tethered(argv, start_new_session=True, **kwargs)


def exit_on_signals() -> None:
    """SIGTERM and SIGHUP end this bench as Ctrl-C does, through its `with` blocks, so that what it started is
    stopped in order and its data directories and CPU groups are removed too (a bench that dies otherwise still
    ends its processes: `spawn`). Call it from the main thread."""
    def leave(signum, _frame) -> None:
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, leave)


def wait_for(check, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up in {timeout_s:g} s")
        time.sleep(0.2)


class Farm(Started):
    """`with Farm() as farm:` a running farm; `farm.cpu()` its CPU ms so far by role."""

    def __init__(self, *, flower: bool = True, workers: int = 2, port: int = 0, cgroups: bool = True,
                 code: Path = ROOT) -> None:
        self.flower, self.workers, self.port = flower, workers, port or free_port()
        self.groups: CpuGroups | None = CpuGroups() if cgroups and available() else None
        self.data = Path(tempfile.mkdtemp(prefix="farm-bench-cost-"))
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
        self.code = code  # the checkout the farm's processes run (another one's, for a before/after pair)
        self.env.update(FARM_DATA_DIR=str(self.data), PYTHONPATH=str(code))
        self.procs: dict[str, subprocess.Popen] = {}
        self.stages: dict[int, str] = {}
        self.base = f"http://127.0.0.1:{self.port}"
        self.token = ""

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def run_code_path(self) -> str:
        return f"/t/{self.token}/run_code"

    def _start(self, name: str, *args: str) -> None:
        with open(self.data / f"bench-{name}.log", "wb") as log:
            self.procs[name] = spawn([sys.executable, "-m", "farm.app.cli", *args], env=self.env, stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.code)

    def start(self) -> None:
        from farm.config import Settings
        from farm.store.engine import open_store
        from farm.store.tenants import create_tenant

        pipelines = [a for p in PIPELINES for a in ("--pipeline", p)]
        self._start("up", "up", *pipelines, "--workers", str(self.workers), "--metrics-port", "0",
                    "--flower-port", str(free_port() if self.flower else 0))
        log = self.data / "bench-up.log"
        wait_for(lambda: self.procs["up"].poll() is None and b"the farm is up" in log.read_bytes()
              or self._died("up"), "farm up")
        endpoint = json.loads((self.data / "endpoint.json").read_text())
        self.redis_url = endpoint["redis_url"]
        engine = open_store(Settings(redis_url=endpoint["redis_url"], data_dir=str(self.data)))
        try:
            _, self.token = create_tenant(engine, "bench", now=time.time())
        finally:
            engine.dispose()
        self._start("gateway", "gateway", "--port", str(self.port))

        def serving() -> bool:
            self._died("gateway")
            return gateway_serving(self.base)
        wait_for(serving, "the gateway")
        for record in (self.data / "workers").glob("*/*.json"):
            found = json.loads(record.read_text())
            self.stages[int(found["pid"])] = found["stage"]
        if self.groups is not None:
            snap = proc_cpu.snapshot()
            for pid, placed in self._where(snap).items():
                if not placed.kind.startswith("sandbox:"):
                    self.groups.move(pid, placed.role)

    def wait_idle(self, timeout_s: float = 120.0) -> float:
        """Wait until the farm has no active batch (the gateway's rolling batches of the last calls sealed, for
        want of samples, and done): from then on it is idle, with nothing to sweep. Returns the seconds waited."""
        import redis as redis_lib

        from farm.config import Settings
        from farm.protocol.keys import Keys

        started, keys = time.monotonic(), Keys(Settings().namespace)
        client = redis_lib.Redis.from_url(self.redis_url)
        try:
            wait_for(lambda: client.zcard(keys.batches) == 0 and client.zcard(keys.seen) == 0, "an idle farm",
                     timeout_s)
        finally:
            client.close()
        return time.monotonic() - started

    @property
    def accounting(self) -> str:
        return "cpuacct cgroups per role, /proc for the worker/sandbox split" if self.groups else "/proc only"

    def _died(self, name: str) -> bool:
        if self.procs[name].poll() is not None:
            raise RuntimeError(f"farm {name} exited: see {self.data / f'bench-{name}.log'}")
        return False

    def stop(self) -> None:
        for name in ("gateway", "up"):  # `farm up` retires its workers on SIGTERM
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(self.data, ignore_errors=True)
        if self.groups is not None:
            self.groups.close()
            self.groups = None

    # -- where the CPU goes ---------------------------------------------------------------------------

    def _place(self, pid: int, parent: Placed) -> Placed:
        kind = parent.kind
        if kind == "farm":
            cmd = proc_cpu.cmdline(pid)
            for word, role in (("redis-server", "redis"), ("launcher_process", "launcher"), ("flower", "flower"),
                               ("planner", "planner")):
                if word in cmd:
                    return Placed(role, role if role != "launcher" else "workers", role)
            return Placed("farm other", "farm other", "other")
        if kind == "launcher":
            stage = self.stages.get(pid)
            return Placed(f"worker {stage}", f"worker {stage}", f"worker:{stage}") if stage else \
                Placed("workers", "workers", "other")
        if kind.startswith(("worker:", "pool:", "sandbox:")):
            stage = kind.partition(":")[2]
            if kind.startswith("worker:"):  # the Celery pool process: the stage's code
                return Placed(f"worker {stage}", f"sandbox {stage}", f"pool:{stage}")
            return Placed(f"sandbox {stage}", f"sandbox {stage}", f"sandbox:{stage}")
        return Placed(parent.children, parent.children, kind)

    def _where(self, snap) -> dict[int, Placed]:
        roots = {self.procs["up"].pid: Placed("recorder", "farm reaped", "farm"),
                 self.procs["gateway"].pid: Placed("gateway", "gateway", "gateway")}
        return proc_cpu.placed(snap, roots, self._place)

    def cpu(self) -> dict[str, float]:
        snap = proc_cpu.snapshot()
        where = self._where(snap)
        if self.groups is None:
            return proc_cpu.by_role(snap, where)
        out = self.groups.usage_ms()
        own: dict[str, float] = {}  # a stage's group: its worker processes' own CPU; the rest is its sandbox runs
        for pid, placed in where.items():
            if placed.kind.startswith(("worker:", "pool:")):
                own[placed.role] = own.get(placed.role, 0.0) + snap[pid].own * proc_cpu.TICK_MS
        for role, ms in own.items():
            out[f"sandbox {role[len('worker '):]}"] = out.get(role, 0.0) - ms
            out[role] = ms
        return out

    def per_process_idle(self, seconds: float) -> list[str]:
        """Each process's (and the `farm up` and gateway processes' threads') idle CPU, ms per second."""
        snap = proc_cpu.snapshot()
        where = self._where(snap)
        mains = (self.procs["up"].pid, self.procs["gateway"].pid)
        threads = {pid: proc_cpu.threads(pid) for pid in mains}
        time.sleep(seconds)
        lines = []
        for pid, placed in sorted(where.items()):
            after = proc_cpu.read(pid)
            if after is not None:
                ms = (after.own + after.reaped - snap[pid].own - snap[pid].reaped) * proc_cpu.TICK_MS / seconds
                lines.append(f"{placed.role:24s} pid {pid:7d} {ms:6.2f} ms/s")
        for pid, before in threads.items():
            for tid, t in proc_cpu.threads(pid).items():
                if tid in before and t.own > before[tid].own:
                    ms = (t.own - before[tid].own) * proc_cpu.TICK_MS / seconds
                    lines.append(f"{where[pid].role:14s} thread {tid:7d} {t.comm:16s} {ms:6.2f} ms/s")
        return lines
