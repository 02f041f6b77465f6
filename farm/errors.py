"""What the trainer client raises. Every refusal of input is an `InvalidInput` (a ValueError) with a
message that says what was wrong; nothing the client refuses reaches a worker or another tenant. Trouble
with the farm itself is a `FarmError`, never a bare redis-py exception."""

from __future__ import annotations

from farm.pipeline import InvalidInput, UnknownPipeline

__all__ = ["InvalidInput", "UnknownPipeline", "BatchNotFound", "BatchConflict", "BatchClosed", "BatchFull",
           "BatchAbandoned", "DuplicateRequest", "PayloadTooLarge", "FarmError", "FarmNotConfigured", "FarmUnavailable",
           "BatchLost", "Unauthorized", "LimitReached", "LimitExceeded", "HTTP_STATUS", "BY_NAME"]


class BatchNotFound(InvalidInput):
    """No batch with this id exists (never opened, or its results expired)."""


class BatchConflict(InvalidInput):
    """A batch id or task reused with a different task, pipeline or size."""


class BatchClosed(InvalidInput):
    """The batch is completed or cancelled and takes no more requests."""

    def __init__(self, message: str, state: str = "") -> None:
        super().__init__(message)
        self.state = state


class BatchAbandoned(BatchClosed):
    """The farm abandoned the batch: its trainer was silent (no submit, result wait or heartbeat) for longer than
    the knob `abandon_after_s`, so its outstanding requests were cancelled. `silent_s` and `after_s` say how long."""

    def __init__(self, message: str, silent_s: float | None = None, after_s: float | None = None) -> None:
        super().__init__(message, state="abandoned")
        self.silent_s = silent_s
        self.after_s = after_s


class BatchFull(InvalidInput):
    """A request beyond the batch's size."""


class DuplicateRequest(InvalidInput):
    """The same request id submitted again with a different payload."""


class PayloadTooLarge(InvalidInput):
    """The payload is over `Settings.max_payload_bytes`."""


class LimitExceeded(InvalidInput):
    """A tenant's limit refuses the call (the gateway answers 429); the message says which and what to do. The
    farm's scripts check the limit on requests outstanding as each request arrives (farm.protocol.calls.Cap)."""


class FarmError(Exception):
    """The farm, not the caller's input, is the trouble."""


class FarmNotConfigured(FarmError):
    """No farm was named: the client does not guess, since any Redis would accept a batch and never answer."""


class FarmUnavailable(FarmError, ConnectionError):
    """The farm's Redis could not be reached within the client's reconnect budget."""


class BatchLost(FarmError):
    """The farm no longer has a batch this client opened (its Redis restarted without persistence) and the
    client could not restore it: it holds none of the batch's outstanding requests to submit again."""


class Unauthorized(FarmError):
    """The gateway does not know the client's API token, or it was revoked (`farm tenants`)."""


class LimitReached(FarmError):
    """A tenant's limit held the call back for longer than the client waits (open batches, requests
    outstanding): wait for results, or ask the operator to raise the limit."""


# How a farm error travels over the gateway's HTTP API: its status, by the most specific class first, and its class's
# name (the answer's `type`), which the gateway client turns back into the same class (farm.client.http_core).
HTTP_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (BatchNotFound, 404), (BatchConflict, 409), (BatchAbandoned, 409), (BatchClosed, 409), (BatchFull, 409),
    (DuplicateRequest, 409), (PayloadTooLarge, 413), (InvalidInput, 400), (FarmError, 503))
# the general two stay general: the client words an unnamed refusal or failure with the status it came with
BY_NAME: dict[str, type[Exception]] = {k.__name__: k for k, _ in HTTP_STATUS if k not in (InvalidInput, FarmError)}
