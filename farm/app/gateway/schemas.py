"""The native API's bodies and answers, as the OpenAPI schema publishes them. Types are strict: a size
sent as "8" is refused, not read as 8."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

MAX_BULK = 10_000


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class OpenBatch(_Body):
    task: StrictStr = Field(description="The training job; batches of one task share its history")
    pipeline: StrictStr = Field(description="A pipeline the farm runs, e.g. math, code, cuda")
    size: StrictInt = Field(description="How many requests the batch will hold")
    batch_id: StrictStr | None = Field(None, description="Your id for the batch (a fresh one when left out); "
                                                         "opening the same batch again attaches to it")
    group_size: StrictInt | None = Field(None, description="Requests per GRPO group, when fixed")


class SubmitRequest(_Body):
    request_id: StrictStr = Field(description="Your id for the request: sending it again is a no-op")
    payload: Any = Field(description="The pipeline's payload (a JSON value)")
    group: StrictStr | StrictInt | None = None


class BulkSubmit(_Body):
    requests: list[SubmitRequest] = Field(max_length=MAX_BULK)


class Submitted(BaseModel):
    request_id: str
    kind: Literal["queued", "finished", "duplicate"]


class BulkSubmitted(BaseModel):
    kinds: list[Literal["queued", "finished", "duplicate"]]


class BatchStatus(BaseModel):
    batch_id: str
    task: str
    pipeline: str
    size: int
    arrived: int
    done: int
    state: str = Field(description="open, completed, cancelled, or abandoned (its trainer was silent too long)")
    opened_at: float
    group_size: int | None = None


class ResultsPage(BaseModel):
    results: list[dict[str, Any]]
    cursor: str = Field(description="Pass it back to read on from here")
    complete: bool = Field(description="The batch has ended: no more results will come")


class GroupsPage(BaseModel):
    groups: list[dict[str, Any]] = Field(description="{group, results} of each group completed after `after`")
    after: int = Field(description="Pass it back as `after` to read the groups completed next")
    complete: bool


class Closed(BaseModel):
    batch_id: str
    state: str


class ErrorBody(BaseModel):
    error: dict[str, str] = Field(description="{type, message}")
