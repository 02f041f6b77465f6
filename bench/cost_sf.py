"""SandboxFusion beside the farm in bench/cost.py: the real server, measured in the same run (issue 34's baseline).

`--sandboxfusion DIR` names a checkout of bytedance/SandboxFusion and `--sandboxfusion-python PY` a Python that has
its dependencies (its pyproject's, transformers included: the server imports every dataset at start). Nothing is
fetched here: the operator provides both, e.g.

    git clone https://github.com/bytedance/SandboxFusion /opt/sf && python3 -m venv /opt/sf-venv
    /opt/sf-venv/bin/pip install 'pydantic>=2.4,<2.7' 'fastapi>=0.103.1,<0.104' 'uvicorn[standard]==0.25.0' \\
        'structlog>=23.1,<24' 'psutil>=5.9.8,<6' 'aiofiles>=23.2.1,<24' 'aiohttp>=3.9.5,<4' 'tenacity>=8.4.2,<9' \\
        'databases[aiomysql,aiosqlite]>=0.9,<0.10' 'transformers>=4.44,<5'

It runs as the issue measured it: its default configuration (`sandbox/configs/local.yaml`: `isolation: none`,
rlimits only, network on), one uvicorn process. One thing differs from its official image: the image runs
programs with the `python` of a conda environment (`sandbox-runtime`), found through conda's `activate`; here its
`get_python_rt_env` is given a directory whose `python` is the interpreter the farm's sandbox and the bare side
run, so all three run the same interpreter (SandboxFusion still runs it its own way: `python main.py` through
`bash -c`, with `site`). Its whole process tree's CPU is read from a cpuacct group of its own (bench.cpu_groups),
or from /proc (bench.proc_cpu) where there is none.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from bench import proc_cpu
from bench.cost_farm import spawn, wait_for
from bench.cpu_groups import CpuGroups, available
from bench.proc_cpu import Placed
from farm.processes import Started

ROLE = "sandboxfusion"
# run inside SandboxFusion's Python: its runtime's PATH from FARM_BENCH_SF_RUNTIME (see the module's docstring),
# then uvicorn on its app, as `uvicorn sandbox.server.server:app` would
SERVE = """
import os, sys
import sandbox.runners.major as major
runtime = os.environ["FARM_BENCH_SF_RUNTIME"]
major.get_python_rt_env = lambda name: {"PATH": runtime + ":" + os.environ.get("PATH", "")}
import uvicorn
uvicorn.run("sandbox.server.server:app", host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


class SandboxFusion(Started):
    """`with SandboxFusion(checkout, python, interpreter, port) as sf:` the server up; `sf.cpu()` its CPU so far."""

    def __init__(self, checkout: Path, python: str, interpreter: str, port: int, cgroups: bool = True) -> None:
        if not (checkout / "sandbox" / "server" / "server.py").is_file():
            raise ValueError(f"{checkout} is not a SandboxFusion checkout (no sandbox/server/server.py)")
        self.checkout, self.python, self.interpreter, self.port = checkout, python, interpreter, port
        self.base = f"http://127.0.0.1:{port}"
        self.headers: dict[str, str] = {}
        self.run_code_path = "/run_code"
        self.groups: CpuGroups | None = CpuGroups() if cgroups and available() else None
        self.home = Path(tempfile.mkdtemp(prefix="farm-bench-sf-"))
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        runtime = self.home / "runtime"
        runtime.mkdir()
        (runtime / "python").symlink_to(self.interpreter)
        # it serves /SandboxFusion from its built docs, which a plain checkout lacks: an empty directory will do
        (self.checkout / "docs" / "build").mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "FARM_BENCH_SF_RUNTIME": str(runtime)}
        env.pop("PYTHONPATH", None)
        with open(self.home / "server.log", "wb") as log:
            self.proc = spawn([self.python, "-c", SERVE, str(self.port)], cwd=self.checkout, env=env, stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if self.groups is not None:
            self.groups.move(self.proc.pid, ROLE)  # before it forks anything: its whole tree follows
        wait_for(self._answers, f"SandboxFusion (its log: {self.home / 'server.log'})", 180.0)

    def _answers(self) -> bool:
        import httpx

        if self.proc.poll() is not None:
            raise RuntimeError(f"SandboxFusion exited: see {self.home / 'server.log'}")
        try:
            return httpx.get(f"{self.base}/v1/ping", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def cpu(self) -> dict[str, float]:
        """Its CPU ms so far, as the farm's `cpu()` gives it by role (one role: the whole server)."""
        if self.groups is not None:
            return {ROLE: self.groups.usage_ms().get(ROLE, 0.0)}
        snap = proc_cpu.snapshot()
        where = proc_cpu.placed(snap, {self.proc.pid: Placed(ROLE, ROLE, ROLE)}, lambda pid, parent: parent)
        return {ROLE: proc_cpu.by_role(snap, where).get(ROLE, 0.0)}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self.groups is not None:
            self.groups.close()
            self.groups = None
        shutil.rmtree(self.home, ignore_errors=True)
