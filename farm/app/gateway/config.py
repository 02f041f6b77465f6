"""The gateway's settings, and how a tenant's configuration says what its OpenRLHF samples and
SandboxFusion runs become on the farm (task, pipeline, payload, batching)."""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping

from farm.app.gateway.rolling import Rolling
from farm.errors import InvalidInput


@dataclass(frozen=True)
class GatewaySettings:
    max_body_bytes: int = 64 << 20  # a bulk submit's body; a single request is bound by the tenant's limit
    body_timeout_s: float = 30.0  # a body that takes longer to arrive is refused (408): no trickled uploads
    auth_ttl_s: float = 5.0  # how long a token's lookup is trusted; a revocation takes at most this long
    max_wait_s: float = 60.0  # the longest long poll
    # how long a stopping gateway lets calls in flight finish: a long poll or a stream would otherwise hold it up
    # for its whole wait (a stream forever); past it they are cut, and their callers' retries reach a gateway that runs
    shutdown_grace_s: float = 5.0
    sweep_s: float = 5.0  # how often lapsed leases are given back while callers wait
    roll_check_s: float = 1.0  # how often idle rolling batches are sealed
    # the proxies whose X-Forwarded-For names the caller (networks, `trusted_proxies`); none: the peer is the caller
    forwarded_allow_ips: tuple[str, ...] = ()


def trusted_proxies(text: str | None) -> tuple[str, ...]:
    """`--forwarded-allow-ips`: a comma list of addresses or networks (CIDR), each checked; empty trusts none.
    No `*`: a gateway that trusts every peer's header logs whatever address a caller claims."""
    out = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            out.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise InvalidInput(f"{item!r:.100} is not an IP address or network (CIDR) of a proxy") from None
    return tuple(out)


@dataclass(frozen=True)
class OpenRLHF:
    """`/get_reward`: a sample is `query` (prompt + response), `prompt`, `label`."""

    task: str = "openrlhf"
    pipeline: str = "math"
    batch_size: int = 256  # OpenRLHF's rollout batch size x samples per prompt: one batch per step
    rollover_s: float = 30.0  # no sample for this long: the step's generation is over, its batch sealed
    wait_s: float = 170.0  # answer within OpenRLHF's 180 s; a retry of the same sample waits on
    response: str = "completion"  # 'completion': the query without its prompt; 'query': all of it
    extra: Mapping[str, Any] = field(default_factory=dict)  # merged into every payload, e.g. {"reward": "fraction"}
    replay_identical: bool = True  # an identical sample within the hour is answered from the first's result

    @property
    def rolling(self) -> Rolling:
        return Rolling(self.task, self.pipeline, self.batch_size, self.rollover_s)


@dataclass(frozen=True)
class SandboxFusion:
    """`/run_code`: each call one request of the `run_code` pipeline."""

    task: str = "sandbox"
    batch_size: int = 64
    rollover_s: float = 5.0
    wait_s: float = 25.0  # verl gives up after 30 s and retries only a 504, which it gets at this point
    replay_identical: bool = True  # an identical run within the hour is answered from the first's result

    @property
    def rolling(self) -> Rolling:
        return Rolling(self.task, "run_code", self.batch_size, self.rollover_s)


def _section(cls, data: Any, name: str):
    if data is None:
        return cls()
    if not isinstance(data, Mapping):
        raise InvalidInput(f"tenant config {name!r} must be an object, not {data!r:.100}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(data) - set(known)
    if unknown:
        raise InvalidInput(f"tenant config {name!r} has unknown keys {sorted(unknown)}; known: {sorted(known)}")
    out = cls()
    for key, value in data.items():
        default = getattr(out, key)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, str):
            ok = isinstance(value, str) and bool(value)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        elif isinstance(default, float):
            ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                  and value > 0)
        else:
            ok = isinstance(value, Mapping)
        if not ok:
            raise InvalidInput(f"tenant config {name}.{key} = {value!r:.100} is not a valid {type(default).__name__}")
        out = replace(out, **{key: float(value) if isinstance(default, float) else value})
    return out


@dataclass(frozen=True)
class TenantProtocols:
    openrlhf: OpenRLHF = OpenRLHF()
    sandbox_fusion: SandboxFusion = SandboxFusion()


SECTIONS = {"openrlhf": OpenRLHF, "sandbox_fusion": SandboxFusion}
REPLAY = "replay_identical"  # the key, in every section, that turns answering identical calls from memory off


def with_replay(config: Mapping[str, Any] | None, replay: bool) -> dict[str, Any]:
    """The config with `replay_identical` set in every protocol's section (`farm tenants set --no-replay-identical`)."""
    config = dict(config or {})
    return {**config, **{name: {**dict(config.get(name) or {}), REPLAY: replay} for name in SECTIONS}}


def protocols(config: Mapping[str, Any] | None) -> TenantProtocols:
    """A tenant's configuration, checked: InvalidInput says what is wrong."""
    config = config or {}
    unknown = set(config) - set(SECTIONS)
    if unknown:
        raise InvalidInput(f"tenant config has unknown sections {sorted(unknown)}; known: {sorted(SECTIONS)}")
    parsed = {name: _section(cls, config.get(name), name) for name, cls in SECTIONS.items()}
    if parsed["openrlhf"].response not in ("completion", "query"):
        raise InvalidInput("tenant config openrlhf.response must be 'completion' or 'query'")
    return TenantProtocols(**parsed)
