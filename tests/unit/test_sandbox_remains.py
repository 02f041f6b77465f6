"""A run's remains reaped behind the worker (workers.sandbox.remains): in order, whatever fails, the uid last, at
most PENDING waiting, and none carried into a fork's child. The real sandbox's remains:
tests/unit/test_sandbox_warm.py."""

from __future__ import annotations

import os
import threading

from workers.sandbox import remains


def test_a_runs_remains_go_in_order_and_its_uid_last():
    done = []
    reaper = remains.Reaper()
    reaper.leave(remains.Remains((lambda: done.append("reap"), lambda: done.append("group")),
                                 lambda: done.append("uid")))
    assert reaper.settle(5)
    assert done == ["reap", "group", "uid"]


def test_a_step_that_fails_does_not_keep_the_others_or_the_uid_from_going(caplog):
    done = []
    reaper = remains.Reaper()

    def fails():
        raise OSError("busy")

    reaper.leave(remains.Remains((fails, lambda: done.append("workdir")), lambda: done.append("uid")))
    assert reaper.settle(5)
    assert done == ["workdir", "uid"]
    assert "could not clear a run's remains" in caplog.text


def test_a_worker_waits_rather_than_leave_more_than_pending_remains():
    gate, done = threading.Event(), []
    reaper = remains.Reaper(pending=1)
    reaper.leave(remains.Remains((gate.wait,), lambda: done.append(1)))  # taken by the thread, held at the gate
    reaper.leave(remains.Remains((), lambda: done.append(2)))  # waits in the queue
    third = threading.Thread(target=reaper.leave, args=(remains.Remains((), lambda: done.append(3)),))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # the queue is full: the third waits
    gate.set()
    third.join(5)
    assert reaper.settle(5)
    assert done == [1, 2, 3]


def test_settle_says_when_remains_are_still_there():
    gate = threading.Event()
    reaper = remains.Reaper()
    reaper.leave(remains.Remains((gate.wait,), lambda: None))
    assert not reaper.settle(0.1)
    assert reaper.pending() == 1
    gate.set()
    assert reaper.settle(5)
    assert reaper.pending() == 0


def test_a_forks_child_reaps_none_of_its_parents_remains_and_leaves_their_descriptors_alone():
    gate, released, reaped = threading.Event(), [], []
    reaper = remains.Reaper()
    reaper.leave(remains.Remains((gate.wait,), lambda: released.append(os.getpid())))
    reaper.leave(remains.Remains((lambda: reaped.append(os.getpid()),), lambda: released.append(os.getpid())))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: what the fork hook does, then what it left
        try:
            reaper._forked()
            ok = released == [] and reaped == [] and reaper.pending() == 0
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    assert os.read(read, 1) == b"1"
    os.close(read)
    gate.set()
    assert reaper.settle(5)
    assert reaped == [os.getpid()] and released == [os.getpid()] * 2


def test_the_reaper_outlives_a_release_that_fails(caplog):
    done = []
    reaper = remains.Reaper()

    def fails():
        raise OSError("bad descriptor")

    reaper.leave(remains.Remains((), fails))
    reaper.leave(remains.Remains((), lambda: done.append("next")))
    assert reaper.settle(5)
    assert done == ["next"] and "could not give back a run's uid" in caplog.text
