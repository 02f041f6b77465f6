"""bench.cost_sf runs a SandboxFusion checkout the way bench/cost.py measures it: its runtime's `python` is the
interpreter given, its whole tree's CPU is counted, and nothing is left behind. The checkout here is a stand-in
with SandboxFusion's layout and the two names the harness touches (`sandbox.runners.major.get_python_rt_env`, which
without conda fails as the real one does, and `sandbox.server.server:app`); the real server needs its own
dependencies, which the bench's operator provides."""

from __future__ import annotations

import os
import sys
import textwrap

import httpx
import pytest

from bench.cost_farm import free_port
from bench.cost_load import drive
from bench.cost_sf import SandboxFusion

MAJOR = '''
def get_python_rt_env(env_name):
    raise RuntimeError("Conda root directory not found.")
'''
SERVER = '''
import subprocess, tempfile, os
from fastapi import FastAPI
from pydantic import BaseModel
from sandbox.runners import major

app = FastAPI()

class Run(BaseModel):
    code: str
    language: str
    stdin: str = ""

@app.get("/v1/ping")
def ping():
    return "pong"

@app.post("/run_code")
def run_code(body: Run):
    env = major.get_python_rt_env("sandbox-runtime")  # looked up at call time, as SandboxFusion's runners do
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "main.py"), "w") as f:
            f.write(body.code)
        done = subprocess.run(["bash", "-c", "python main.py"], cwd=tmp, input=body.stdin.encode(),
                              capture_output=True, env={**os.environ, **env})
    status = "Success" if done.returncode == 0 else "Failed"
    return {"status": status, "run_result": {"stdout": done.stdout.decode(), "stderr": done.stderr.decode()}}
'''


@pytest.fixture
def checkout(tmp_path):
    for package in ("sandbox", "sandbox/runners", "sandbox/server"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "sandbox/runners/major.py").write_text(textwrap.dedent(MAJOR))
    (tmp_path / "sandbox/server/server.py").write_text(textwrap.dedent(SERVER))
    return tmp_path


def test_its_programs_run_on_the_interpreter_given_and_their_cpu_is_counted(checkout):
    with SandboxFusion(checkout, sys.executable, sys.executable, free_port()) as sf:
        reply = httpx.post(f"{sf.base}{sf.run_code_path}", timeout=30,
                           json={"code": "import sys\nprint(sys.executable)", "language": "python"}).json()
        assert reply["status"] == "Success", reply
        assert reply["run_result"]["stdout"].strip() == str(sf.home / "runtime" / "python")
        before = sum(sf.cpu().values())
        drive(sf, "py_io", 6, 2, "test")  # raises unless every answer is a Success
        assert sum(sf.cpu().values()) - before >= 6 * 5  # six Python start-ups at least, in processes the server started


def test_stopping_it_leaves_no_process_and_no_directory(checkout):
    sf = SandboxFusion(checkout, sys.executable, sys.executable, free_port())
    with sf:
        pid, home = sf.proc.pid, sf.home
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert not home.exists()
