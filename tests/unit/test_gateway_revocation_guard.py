"""A revoked tenant's waits end at once with Unauthenticated and their work is cancelled; another tenant's
waits, and work that finishes first, are untouched."""

from __future__ import annotations

import asyncio

import pytest

from farm.app.gateway.auth import Unauthenticated
from farm.app.gateway.revocation import Revocations


def run(main):
    return asyncio.run(asyncio.wait_for(main(), 5))


def test_revoking_ends_the_tenants_waits_and_cancels_their_work():
    async def main():
        revocations, cancelled = Revocations(), []

        async def forever():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        waits = [asyncio.create_task(revocations.guard(1, forever())) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert revocations.waiting() == {1}
        revocations.revoke(1)
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
        return outcomes, cancelled, revocations.waiting()
    outcomes, cancelled, waiting = run(main)
    assert all(isinstance(o, Unauthenticated) for o in outcomes) and cancelled == [True, True] and waiting == set()


def test_a_revoked_tenants_new_wait_is_refused_before_its_work_starts():
    async def main():
        revocations, started = Revocations(), []

        async def work():
            started.append(True)
        revocations.revoke(1)
        with pytest.raises(Unauthenticated, match="revoked"):
            await revocations.guard(1, work())
        return started
    assert run(main) == []


def test_another_tenants_wait_and_finished_work_are_untouched():
    async def main():
        revocations = Revocations()

        async def answer(value, delay):
            await asyncio.sleep(delay)
            return value
        other = asyncio.create_task(revocations.guard(2, answer("beta", 0.05)))
        done = await revocations.guard(1, answer("alpha", 0))
        revocations.revoke(1)
        return done, await other, revocations.waiting()
    assert run(main) == ("alpha", "beta", set())


def test_an_error_of_the_work_is_raised_as_it_is():
    async def main():
        async def fail():
            raise TimeoutError("late")
        with pytest.raises(TimeoutError, match="late"):
            await Revocations().guard(1, fail())
    run(main)
