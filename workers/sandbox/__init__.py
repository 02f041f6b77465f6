"""The sandbox every piece of model-produced code runs in (and the verifiers that parse model output).

Two ways in, one set of limits (`Limits`):

- `run(argv, ...)` executes a program. The chain is made of util-linux tools, not a hand-written jail:
  `unshare --net --pid --fork --kill-child --mount --mount-proc` (no network: only a downed loopback;
  its own PID namespace, so every process it starts dies with it, even one that left the process group),
  a `/bin/sh` init that mounts size-capped tmpfs over /tmp, /var/tmp and /dev/shm, then
  `setpriv` to a dedicated unprivileged uid (no groups, no capabilities, no-new-privs) and `prlimit`
  (CPU seconds, address space or data size, process count, file size, open files, no core dumps).
  The working directory is a fresh tmpfs (its size is the disk quota), removed afterwards; the
  environment is rebuilt from nothing (PATH, HOME, LANG, TMPDIR and what the caller passes); stdout
  and stderr are capped (the group is killed at the cap); the wall limit kills the whole group.
- `spawn(argv, ...)` starts a program contained the same way that another party talks to over pipes
  it is given (the response's function, called by the tests); it ends with the block around it.
- `call(fn, arg, ...)` runs trusted verifier code on untrusted input (math-verify parses model
  output with sympy, which evaluates strings) in a forked child: its own session, a new network
  namespace, rlimits, the dedicated uid, every inherited descriptor closed, the result back as JSON.

Each run holds one uid from a pool (`FARM_SANDBOX_UIDS`, default 61000-61999) through a lock file,
so RLIMIT_NPROC (counted per real uid) caps that run alone and a fork bomb cannot starve the worker
or a neighbouring sandbox. Modes, probed once per process (`mode()`):

- `root` (the worker runs as root, as in our images): everything above.
- `userns` (not root, unprivileged user namespaces allowed): the same namespaces via
  `unshare --user --map-root-user`, but no uid change: the process count is shared with the
  worker's own uid and the working directory is a plain directory (no disk quota beyond the
  per-file cap). A warning is logged.
- neither: the sandbox fails closed (`SandboxUnavailable`, which stages report as `infra_error`),
  unless the operator sets `FARM_SANDBOX_ALLOW_UNCONTAINED=1`, which runs with rlimits and a process
  group only, no namespaces (a loud warning; for development machines, never for a farm).

One concept a module: `limits` (what a run may use, what it gives back), `isolation` (the mode and
the command chain), `uids` (the uid pool), `workdir` (the private working directory), `program`
(`run` and its supervision), `verifier` (`call` in a forked child). docs/sandbox.md says what is
contained and how it is tested.
"""

from workers.sandbox.isolation import SANDBOX_PATH, hidden_paths, mode, python_executable
from workers.sandbox.limits import CallResult, GiB, Limits, MiB, RunResult, SandboxUnavailable
from workers.sandbox.program import Spawned, run, spawn
from workers.sandbox.verifier import call
from workers.sandbox.workdir import sandbox_root

__all__ = ["SANDBOX_PATH", "CallResult", "GiB", "Limits", "MiB", "RunResult", "SandboxUnavailable", "Spawned", "call",
           "hidden_paths", "mode", "python_executable", "run", "sandbox_root", "spawn"]
