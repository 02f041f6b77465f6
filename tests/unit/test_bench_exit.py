"""A cost bench that ends however (`timeout`'s SIGTERM, a closed terminal's SIGHUP, a `kill -9`) leaves nothing of
what it started running: its farms run in sessions of their own, which no signal to the bench reaches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a bench in miniature: a Started whose process it spawns as bench.cost_farm.Farm's are
BENCH = """
import sys, time
from bench.cost_farm import exit_on_signals, spawn
from farm.processes import Started

class Sleeper(Started):
    def start(self):
        self.proc = spawn(["sleep", "600"])
        print(self.proc.pid, flush=True)

    def stop(self):
        self.proc.kill()
        self.proc.wait()

exit_on_signals()
with Sleeper():
    time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie not yet reaped by init is gone for our purpose
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def end_bench_and_wait_for_its_child(signum: int, exit_code: int) -> None:
    bench = subprocess.Popen([sys.executable, "-c", BENCH], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = int(bench.stdout.readline())
    try:
        assert alive(child)
        bench.send_signal(signum)
        assert bench.wait(timeout=30) == exit_code
        deadline = time.monotonic() + 10
        while alive(child):
            assert time.monotonic() < deadline, "the bench's child outlived it"
            time.sleep(0.05)
    finally:
        bench.kill()
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_bench_ended_by_a_signal_stops_the_processes_it_started(signum):
    end_bench_and_wait_for_its_child(signum, 128 + signum)  # through its with block: stopped in order


def test_a_bench_killed_outright_still_ends_the_processes_it_started():
    end_bench_and_wait_for_its_child(signal.SIGKILL, -signal.SIGKILL)  # no with block runs: the tether ends them
