"""bench.proc_cpu, the CPU accounting of bench/cost.py: what a process burned, and what its ended children burned,
is found in /proc and placed on the right role."""

from __future__ import annotations

import subprocess
import sys

from bench import proc_cpu
from bench.proc_cpu import Placed, Proc

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
# a parent that waits for a go line (so the test's first reading comes before any burning, however late the test
# is scheduled), runs the burner to its end (and reaps it), says so, then waits for its stdin to close
PARENT = ("import subprocess, sys\nsys.stdin.readline()\nsubprocess.run([sys.executable, '-c', sys.argv[1]], "
          "check=True)\nprint('done', flush=True)\nsys.stdin.read()\n")


def _leaf(pid: int, ppid: int = 1) -> Proc:
    return Proc(pid, ppid, "x", 0, 0)


def test_a_child_that_burned_300_ms_of_cpu_reads_as_about_that():
    child = subprocess.Popen([sys.executable, "-c", BURN + "import sys\nprint('done', flush=True)\nsys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"
        burned = proc_cpu.read(child.pid).own * proc_cpu.TICK_MS
    finally:
        child.communicate("")
    assert 290 <= burned <= 600


def test_a_grandchild_that_ended_is_counted_on_its_parents_children_role():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        before = proc_cpu.snapshot()
        roots = {parent.pid: Placed("parent", "kids", "parent")}
        parent.stdin.write("go\n")
        parent.stdin.flush()
        assert parent.stdout.readline() == "done\n"
        after = proc_cpu.snapshot()
        used = proc_cpu.delta(proc_cpu.by_role(before, proc_cpu.placed(before, roots, lambda pid, p: p)),
                              proc_cpu.by_role(after, proc_cpu.placed(after, roots, lambda pid, p: p)))
    finally:
        parent.communicate("")
    assert 290 <= used["kids"] <= 600


def test_placing_walks_the_whole_tree_below_the_roots_and_nothing_else():
    snap = {1: _leaf(1, 0), 10: _leaf(10), 11: _leaf(11, 10), 12: _leaf(12, 11), 20: _leaf(20)}
    depth = lambda pid, parent: Placed(parent.role + "+", parent.children, parent.kind)  # noqa: E731
    where = proc_cpu.placed(snap, {10: Placed("r", "c", "k")}, depth)
    assert {pid: p.role for pid, p in where.items()} == {10: "r", 11: "r+", 12: "r++"}


def test_a_process_own_ticks_go_to_its_role_and_its_reaped_ones_to_its_childrens():
    snap = {5: Proc(5, 1, "w", 3, 7)}
    ms = proc_cpu.by_role(snap, {5: Placed("worker", "sandbox", "w")})
    assert ms == {"worker": 3 * proc_cpu.TICK_MS, "sandbox": 7 * proc_cpu.TICK_MS}


def test_the_difference_leaves_out_roles_that_used_nothing():
    assert proc_cpu.delta({"a": 5.0, "b": 1.0}, {"a": 5.0, "b": 4.0, "c": 2.0}) == {"b": 3.0, "c": 2.0}


def test_a_process_that_is_gone_reads_as_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert proc_cpu.read(child.pid) is None
