"""bench/cost.py's workloads: each one's requests through the gateway at a given concurrency, and the same
program run bare with plain `subprocess` (or, for math, the verifier in a plain fork)."""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from workers.pipelines.code.run_code import GXX
from workers.sandbox import python_executable

WORKLOADS = ("py_io", "humaneval", "math", "cpp")
CPP = "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n"
PY_IO = "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"


def _humaneval() -> list[str]:
    from workers.testcases import HumanEvalStore

    store = HumanEvalStore()
    programs = []
    for pid in store.ids()[:40]:
        p = store.raw(pid)
        programs.append(f"{p['prompt']}{p['canonical_solution']}\n\n{p['test']}\ncheck({p['entry_point']})\n")
    return programs


_PROGRAMS: list[str] = []


def program(workload: str, i: int, tag: str) -> tuple[str, str]:
    """(code, stdin) of request `i`; distinct per request, since the gateway replays an identical body."""
    if workload == "py_io":
        return f"{PY_IO}# {tag} {i}\n", f"1 2 {i}"
    if workload == "humaneval":
        if not _PROGRAMS:
            _PROGRAMS.extend(_humaneval())
        return f"{_PROGRAMS[i % len(_PROGRAMS)]}# {tag} {i}\n", ""
    if workload == "cpp":
        return f"{CPP}// {tag} {i}\n", f"2 {i}"
    raise ValueError(workload)


def math_payload(i: int) -> dict:
    return {"response": f"Halving {i} gives \\boxed{{\\frac{{{i}}}{{2}}}}.", "answer": f"{i / 2:g}"}


def drive(target, workload: str, n: int, concurrency: int, tag: str) -> None:
    """`n` requests, `concurrency` in flight, each answered before its client thread sends the next. `target` is
    the farm (bench.cost_farm.Farm) or, for `/run_code` workloads, SandboxFusion (bench.cost_sf): its `base`,
    `headers` and `run_code_path`."""
    import httpx

    local, batches, failed = threading.local(), [], []
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    with httpx.Client(base_url=target.base, headers=target.headers, timeout=120, limits=limits) as http:
        def run_code(i: int) -> None:
            code, stdin = program(workload, i, tag)
            body = {"code": code, "stdin": stdin, "language": "cpp" if workload == "cpp" else "python"}
            reply = http.post(target.run_code_path, json=body)
            if reply.status_code != 200 or reply.json()["status"] != "Success":
                failed.append(reply.text[:300])

        def math(i: int) -> None:
            if not hasattr(local, "batch"):
                local.batch, local.cursor = f"m-{tag}-{threading.get_ident()}-{os.urandom(3).hex()}", "0-0"
                http.post("/v1/batches", json={"task": "bench", "pipeline": "math", "size": n,
                                               "batch_id": local.batch}).raise_for_status()
                batches.append(local.batch)
            http.post(f"/v1/batches/{local.batch}/requests",
                      json={"request_id": f"r{i}", "payload": math_payload(i)}).raise_for_status()
            got: list = []
            while not got:
                body = http.get(f"/v1/batches/{local.batch}/results", params={"cursor": local.cursor, "wait_s": 10}
                                ).json()
                got, local.cursor = body["results"], body["cursor"]
            if got[0]["status"] != "ok":
                failed.append(str(got[0])[:300])

        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(math if workload == "math" else run_code, range(n)))
        for batch in batches:
            http.post(f"/v1/batches/{batch}/seal")
    if failed:
        raise RuntimeError(f"{workload}: {len(failed)} of {n} requests failed, e.g. {failed[0]}")


def _children_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def _bare_math(i: int) -> None:
    from workers.pipelines.math import equivalent

    p = math_payload(i)
    pid = os.fork()
    if pid == 0:
        ok = equivalent({"reference": p["answer"], "answer": f"\\frac{{{i}}}{{2}}"}).get("ok")
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError(f"bare math: request {i} was not judged right")


def _bare_program(workload: str, i: int, where: Path) -> None:
    code, stdin = program(workload, i, "bare")
    if workload == "cpp":
        (where / "main.cpp").write_text(code)
        subprocess.run(GXX, cwd=where, capture_output=True, check=True)
        argv = ["./main"]
    else:
        (where / "main.py").write_text(code)
        argv = [python_executable(), "-E", "-s", "-S", "main.py"]
    subprocess.run(argv, cwd=where, input=stdin.encode(), capture_output=True, check=True)


def bare_ms(workload: str, n: int) -> float:
    """CPU ms per run of the farm's command for the workload, run here one at a time."""
    if workload == "math":
        from workers.pipelines.math import warm_up

        warm_up()  # as a worker does before its first fork
    with tempfile.TemporaryDirectory(prefix="farm-bench-bare-") as tmp:
        before = _children_ms()
        for i in range(n):
            if workload == "math":
                _bare_math(i)
            else:
                _bare_program(workload, i, Path(tmp))
        return (_children_ms() - before) / n
