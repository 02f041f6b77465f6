"""What a sandboxed run is allowed (`Limits`) and what it gives back (`RunResult`, `CallResult`).

One set of limits serves both ways in (`run` a program, `call` a verifier); the results say how the
code ended in words a stage can put in its message.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Mapping

MiB = 1 << 20
GiB = 1 << 30


class SandboxUnavailable(RuntimeError):
    """This machine cannot contain untrusted code (no namespaces, tools missing); fail closed."""


@dataclass(frozen=True)
class Limits:
    wall_s: float = 10.0
    cpu_s: float | None = None  # None: the wall limit, rounded up
    # RLIMIT_AS; None leaves address space free (CUDA maps huge ranges). For `call` it is what the forked child may
    # add to the worker's own mappings; a program (`run`) starts afresh and gets it whole.
    memory_bytes: int | None = 1 * GiB
    data_bytes: int | None = None  # RLIMIT_DATA: the memory cap to use where RLIMIT_AS cannot be (GPU programs)
    nproc: int = 64
    file_bytes: int = 64 * MiB  # largest file the program may write
    disk_bytes: int = 256 * MiB  # the working directory's tmpfs (and each of /tmp, /var/tmp, /dev/shm)
    output_bytes: int = 4 * MiB  # per stream; past it the run is killed and marked output_exceeded
    nofile: int = 256
    gpu: bool = False  # the run sees this worker's GPU device nodes (the CUDA execute stage)

    def cpu_seconds(self) -> int:
        return max(1, int(-(-(self.cpu_s if self.cpu_s is not None else self.wall_s) // 1)))

    def run_memory_bytes(self) -> int:
        """The memory of the whole run, all its processes together (its cgroup's limit): the per-process cap
        where there is one, else the data cap (GPU programs, whose address space cannot be capped)."""
        for cap in (self.memory_bytes, self.data_bytes):
            if cap is not None:
                return cap
        return 4 * GiB


@dataclass(frozen=True)
class RunResult:
    returncode: int | None  # exit status; None when killed by a signal
    signal: int | None  # the signal that ended the program, if one did
    stdout: bytes
    stderr: bytes
    wall_s: float
    timed_out: bool = False  # the wall limit, or the CPU limit (SIGXCPU)
    output_exceeded: bool = False
    files: Mapping[str, bytes] = field(default_factory=dict)  # the requested files the program left
    memory_exceeded: bool = False  # the kernel killed a process of the run at the run's memory limit

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.output_exceeded

    def describe(self) -> str:
        """One line saying how the program ended, for result messages."""
        if self.timed_out:
            return f"time limit exceeded after {self.wall_s:.2f} s"
        if self.output_exceeded:
            return "output limit exceeded (killed)"
        if self.memory_exceeded:
            return "memory limit exceeded (killed)"
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:  # a real-time signal has no name in the enum (and an exit of 128+n reads the same)
                name = f"signal {self.signal}"
            hint = {signal.SIGXFSZ: " (file size limit)", signal.SIGSEGV: " (segmentation fault)"}.get(self.signal, "")
            return f"killed by {name}{hint}"
        return f"exit status {self.returncode}"


@dataclass(frozen=True)
class CallResult:
    value: Any = None  # what fn returned (JSON round-tripped)
    error: str = ""  # fn raised: its traceback's last lines
    timed_out: bool = False
    wall_s: float = 0.0
    # the child ended without a result (killed, exited, a result over the output cap): how, in words. On
    # untrusted input that is the input's doing (it made the verifier exhaust its memory, say), not the farm's.
    ended: str = ""
    memory_exceeded: bool = False
