"""When an identical call is answered from the first one's result: a result the farm caused is never replayed
(its retry runs again), a finished one is replayed unless the tenant turned replay off, and a request still
running is waited on either way."""

from __future__ import annotations

import pytest

from farm.app.gateway.rolling import rerun_id, runs_again
from farm.results import Result, Status


def finished(status: Status) -> Result:
    return Result(request_id="r", batch_id="b", status=status)


@pytest.mark.parametrize("status", [Status.INFRA_ERROR, Status.CANCELLED])
def test_a_result_the_farm_caused_is_never_replayed(status):
    assert runs_again(finished(status), replay=True)


@pytest.mark.parametrize("status", [Status.OK, Status.WRONG, Status.TIMEOUT, Status.RUNTIME_ERROR,
                                    Status.COMPILE_ERROR, Status.INVALID_INPUT])
def test_a_result_of_the_sample_itself_is_replayed(status):
    assert not runs_again(finished(status), replay=True)


def test_with_replay_off_every_finished_result_runs_again():
    assert runs_again(finished(Status.OK), replay=False)


@pytest.mark.parametrize("replay", [True, False])
def test_a_request_still_running_is_waited_on(replay):
    assert not runs_again(None, replay)


def test_reruns_are_numbered_after_the_first_request():
    assert rerun_id("ab12") == "ab12-r1" and rerun_id("ab12-r1") == "ab12-r2"
