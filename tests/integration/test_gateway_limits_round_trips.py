"""A tenant's outstanding requests are read with the batch's progress in one round trip on a real Redis: the
script goes in the pipeline as an EVALSHA (redis-py would ask SCRIPT EXISTS before every execution first), and a
Redis that lacks the script is sent it once."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from farm.app.gateway.limits import Limits
from farm.errors import BatchNotFound
from farm.protocol.scripts import OUTSTANDING, SOURCES

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


def admit(redis_url: str, namespace: str, limits_of, monkeypatch) -> list[bytes]:
    """What the connections sent for one admission (after one that warms up the script), the batch unknown."""
    async def main():
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        limits = limits_of(r)
        try:
            with pytest.raises(BatchNotFound):
                await limits.admit_requests(r, 1, 1, 10, f"{namespace}-none")
            sent: list[bytes] = []
            real = Connection.send_packed_command

            async def counted(self, command, *args, **options):
                packed = command if isinstance(command, (bytes, bytearray)) else b"".join(command)
                sent.append(bytes(packed))
                return await real(self, command, *args, **options)
            monkeypatch.setattr(Connection, "send_packed_command", counted)
            with pytest.raises(BatchNotFound):
                await limits.admit_requests(r, 1, 1, 10, f"{namespace}-none")
            monkeypatch.setattr(Connection, "send_packed_command", real)
            return sent
        finally:
            await r.aclose()
    return asyncio.run(main())


def test_admitting_requests_is_one_round_trip(redis_url, namespace, monkeypatch):
    sent = admit(redis_url, namespace, lambda r: Limits(r, namespace), monkeypatch)
    assert len(sent) == 1
    assert b"EVALSHA" in sent[0] and b"SCRIPT" not in sent[0]


def test_a_redis_without_the_script_is_sent_it_once_and_the_admission_goes_on(redis_url, namespace):
    async def main():
        r = aioredis.Redis.from_url(redis_url, decode_responses=True)
        limits = Limits(r, namespace)
        # a source no Redis has seen yet: its first EVALSHA fails with NOSCRIPT, as after a restart of Redis
        limits._outstanding = r.register_script(SOURCES[OUTSTANDING.name] + f"\n-- {uuid.uuid4().hex}\n")
        try:
            assert await r.script_exists(limits._outstanding.sha) == [False]
            with pytest.raises(BatchNotFound):  # got as far as reading the batch: the script ran
                await limits.admit_requests(r, 1, 1, 10, f"{namespace}-none")
            return await r.script_exists(limits._outstanding.sha)
        finally:
            await r.aclose()
    assert asyncio.run(main()) == [True]
