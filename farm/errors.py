"""What the trainer client raises. Every refusal of input is an `InvalidInput` (a ValueError) with a
message that says what was wrong; nothing the client refuses reaches a worker or another tenant."""

from __future__ import annotations

from farm.pipeline import InvalidInput, UnknownPipeline

__all__ = ["InvalidInput", "UnknownPipeline", "BatchNotFound", "BatchConflict", "BatchClosed", "BatchFull",
           "DuplicateRequest", "PayloadTooLarge"]


class BatchNotFound(InvalidInput):
    """No batch with this id exists (never opened, or its results expired)."""


class BatchConflict(InvalidInput):
    """A batch id or task reused with a different task, pipeline or size."""


class BatchClosed(InvalidInput):
    """The batch is completed or cancelled and takes no more requests."""

    def __init__(self, message: str, state: str = "") -> None:
        super().__init__(message)
        self.state = state


class BatchFull(InvalidInput):
    """A request beyond the batch's size."""


class DuplicateRequest(InvalidInput):
    """The same request id submitted again with a different payload."""


class PayloadTooLarge(InvalidInput):
    """The payload is over `Settings.max_payload_bytes`."""
