"""The sandbox every piece of model-produced code runs in (and the verifiers that parse model output).

Two ways in, one set of limits (`Limits`):

- `run(argv, ...)` executes a program: one exec of bubblewrap from a child of the worker that joined the run's
  cgroup (memory and processes capped for the whole run), set its rlimits (CPU seconds, address space or data
  size, file size, open files, no core dumps) and dropped to a uid of its own. bubblewrap makes new user,
  mount, PID, network, IPC, UTS and cgroup namespaces and a root built from an allow-list (read-only /usr and
  the interpreter's tree, a farm-made /etc, a minimal /dev, its own /proc, size-capped private /work, /tmp and
  /dev/shm; nothing else of the host). The environment is rebuilt from nothing; stdout and stderr are capped;
  the wall limit kills the run; at its end its cgroup is emptied and removed: nothing it started survives.
- `spawn(argv, ...)` starts a program contained the same way that another party talks to over pipes
  it is given (the response's function, called by the tests); it ends with the block around it.
- `call(fn, arg, ...)` runs trusted verifier code on untrusted input (math-verify parses model
  output with sympy, which evaluates strings) in a forked child: its own session and cgroup, new network,
  IPC and UTS namespaces, an empty read-only root, rlimits, the dedicated uid with fresh keyrings, every
  inherited descriptor closed, the result back as JSON.

Each run holds one uid from a pool (`FARM_SANDBOX_UIDS`, default 61000-61999) through a lock file. Modes,
probed once per process (`mode()`, said at a worker's start by `describe()`): `root` (everything above; our
images run workers as root), else the sandbox fails closed (`SandboxUnavailable`, which stages report as
`infra_error`) unless the operator sets `FARM_SANDBOX_ALLOW_UNCONTAINED=1` (rlimits only; development).

One concept a module: `limits` (what a run may use, what it gives back), `isolation` (the mode and the launch),
`root` (the allow-list filesystem), `cgroups` (per-run resource control, v1 and v2), `uids` (the uid pool),
`workdir` (the private working directory), `prepared` (what one run holds, and giving it back), `program`
(`run`, `spawn` and their supervision), `parked` (a sandbox launched ahead of its run), `verifier`
(`call` in a forked child), `live` (the runs of the request a worker serves, ended at once when it loses it),
`warm` (a Python script's sandbox started before its run), `remains` (what a killed run leaves, cleared behind the
worker).
docs/sandbox.md says what is contained and how each part is tested.
"""

from workers.sandbox.isolation import SANDBOX_PATH, describe, hidden_paths, mode, python_executable
from workers.sandbox.limits import CallResult, GiB, Limits, MiB, RunResult, SandboxUnavailable
from workers.sandbox.live import RunsEnded
from workers.sandbox.program import Spawned, run, spawn
from workers.sandbox.verifier import call
from workers.sandbox.workdir import sandbox_root

__all__ = ["SANDBOX_PATH", "CallResult", "GiB", "Limits", "MiB", "RunResult", "RunsEnded", "SandboxUnavailable",
           "Spawned", "call", "describe", "hidden_paths", "mode", "python_executable", "run", "sandbox_root", "spawn"]
