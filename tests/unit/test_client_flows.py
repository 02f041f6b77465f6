"""The client's control flow without Redis: each flow driven by hand, its replies fed in, the operations it asks
for checked (farm.client.flows, farm.protocol.exchange)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from farm import registry
from farm.client.core import BatchHandle, BatchInfo, GroupTracker, Session, sweep_interval
from farm.client.flows import Exchange, Flows, InFlight, Riding, Send, Sleep, Wake
from farm.config import Settings
from farm.errors import BatchAbandoned, BatchFull, BatchLost, FarmUnavailable
from farm.knobs import Knobs
from farm.protocol import reads
from farm.protocol.exchange import Exchanges
from farm.protocol.flow import Read, Reads, Steps, run
from farm.protocol.keys import Keys
from farm.protocol.scripts import OPEN, SUBMIT, SUBMIT_MANY, SWEEP, TOUCH, Call
from farm.results import Result, Status

SETTINGS = Settings(namespace="unit", redis_url="redis://h:1/0", lease_s=4.0, reconnect_s=1.0)
QUEUED = {"times": [1.0, 0.0]}  # a request for the synthetic pipeline's first stage


class Farm:
    """A scripted farm: answers every operation a flow asks for, and remembers them in order."""

    def __init__(self, clock: list[float], **replies) -> None:
        self.clock, self.asked, self.replies = clock, [], replies
        self.fail: dict[type, list[BaseException]] = {}  # the next operations of a kind that fail, in turn

    def __call__(self, op):
        self.asked.append(op)
        failures = self.fail.get(type(op))
        if failures:
            raise failures.pop(0)
        if isinstance(op, Sleep):
            self.clock[0] += op
            return None
        if isinstance(op, Send):
            return ("handle", op.call)
        if isinstance(op, InFlight):
            return self.script(op.handle[1])
        if isinstance(op, Call):
            return self.script(op)
        if isinstance(op, Read):
            return self.replies.get(op.fn.__name__)
        if isinstance(op, Reads):
            return [self.replies.get(read.fn.__name__) for read in op.reads]
        return None  # a Wake

    def script(self, call: Call):
        if call.script is SUBMIT_MANY:
            return [self.reply("submit")] * int(call.args[0])
        return self.reply(call.script.name)

    def reply(self, name: str):
        """The reply to a script by name; a list of replies in `turns` are given one per call."""
        turns = self.replies.get("turns", {}).get(name)
        if turns:
            return turns.pop(0)
        return self.replies.get(name, ["queued"] if name == "submit" else None)

    def kinds(self) -> list[str]:
        """What was asked, in order: a script or a read by its name, reads together joined by '+', the rest by
        their kind."""
        return [op.script.name if isinstance(op, Call) else op.fn.__name__ if isinstance(op, Read)
                else "+".join(read.fn.__name__ for read in op.reads) if isinstance(op, Reads)
                else type(op).__name__ for op in self.asked]


def setup(settings: Settings = SETTINGS, group_size: int | None = None, **replies):
    clock = [0.0]
    flows = Flows(Session(settings), Exchanges(settings, clock=lambda: clock[0]), (ConnectionError,), None,
                  wall=lambda: 100.0, clock=lambda: clock[0])
    batch = BatchHandle(SimpleNamespace(flows=flows), BatchInfo("b0", "t", registry.get("synthetic"), 8, group_size))
    farm = Farm(clock, knobs_copy=json.dumps(Knobs().to_dict()), **replies)
    return flows, batch, farm


def drive(flows: Flows, flow, farm: Farm):
    return run(Riding(flow, flows), farm)


def requests(n: int) -> list[tuple[str, dict]]:
    return [(f"r{i}", QUEUED) for i in range(n)]


def test_a_bulk_submit_keeps_one_chunk_in_flight_and_runs_the_last_one_at_once(monkeypatch):
    monkeypatch.setattr("farm.client.flows.SUBMIT_CHUNK", 2)
    flows, batch, farm = setup()
    assert drive(flows, flows.submit_many(batch, requests(5)), farm) == ["queued"] * 5
    assert farm.kinds() == ["knobs_copy", "Send", "InFlight", "Send", "InFlight", "submit"]


def test_one_request_goes_in_one_round_trip_run_at_once():
    flows, batch, farm = setup()
    assert drive(flows, flows.submit(batch, "r0", QUEUED, None), farm) == "queued"
    assert farm.kinds() == ["knobs_copy", "submit"]


def test_the_knobs_are_read_once_for_submits_a_second_apart_at_most():
    flows, batch, farm = setup()
    drive(flows, flows.submit(batch, "r0", QUEUED, None), farm)
    farm.clock[0] += 0.5
    drive(flows, flows.submit(batch, "r1", QUEUED, None), farm)
    assert farm.kinds() == ["knobs_copy", "submit", "submit"]


def test_a_refusal_by_the_farm_is_raised_once_the_chunk_before_is_in_and_sends_no_later_chunk(monkeypatch):
    monkeypatch.setattr("farm.client.flows.SUBMIT_CHUNK", 2)
    flows, batch, farm = setup(submit=["full", "8"])
    with pytest.raises(BatchFull):
        drive(flows, flows.submit_many(batch, requests(6)), farm)
    assert farm.kinds() == ["knobs_copy", "Send", "InFlight"]
    assert batch.submitted.items() == []


def test_a_batch_the_farm_lost_is_opened_again_with_what_the_handle_holds_before_the_chunk_goes_again():
    flows, batch, farm = setup(open=["opened"])
    drive(flows, flows.submit(batch, "r0", QUEUED, None), farm)
    farm.replies["turns"], farm.asked = {"submit": [["unknown"]]}, []
    assert drive(flows, flows.submit(batch, "r1", QUEUED, None), farm) == "queued"
    assert farm.kinds() == ["submit", "open", "submit", "submit"]  # r1 unknown; r0 submitted again; r1 again
    assert [op.arg("request") for op in farm.asked if op.script is SUBMIT] == ["r1", "r0", "r1"]
    assert [rid for rid, _, _ in batch.submitted.items()] == ["r0", "r1"]


def test_a_batch_lost_again_while_it_is_restored_is_lost():
    flows, batch, farm = setup(open=["opened"])
    drive(flows, flows.submit(batch, "r0", QUEUED, None), farm)
    farm.replies["submit"] = ["unknown"]
    with pytest.raises(BatchLost, match="again while it was being restored"):
        drive(flows, flows.submit(batch, "r1", QUEUED, None), farm)


def test_a_queued_request_asks_for_a_wake_up_token_when_the_broker_is_not_the_farms_redis():
    flows, batch, farm = setup(Settings(namespace="unit", redis_url="redis://h:1/0", broker_url="amqp://rabbit//"))
    drive(flows, flows.submit_many(batch, requests(3)), farm)
    [wake] = [op for op in farm.asked if isinstance(op, Wake)]
    assert (wake.queue, wake.count) == ("synthetic.compile", 3)


def test_an_operation_that_fails_for_a_moment_is_run_again_after_a_pause_and_counts_one_outage():
    flows, batch, farm = setup(progress={"task": "t", "pipeline": "synthetic", "size": "8", "arrived": "0",
                                        "done": "0", "state": "open", "opened_at": "1", "key": "1"})
    farm.fail[Read] = [ConnectionError("gone"), ConnectionError("gone")]
    assert drive(flows, flows.progress("b0"), farm).size == 8
    assert farm.kinds() == ["progress", "Sleep", "progress", "Sleep", "progress"]
    assert farm.asked[1] == 0.05 and farm.asked[3] == 0.1 and flows.outages == 1


def test_an_outage_longer_than_the_reconnect_budget_is_the_farms_own_error():
    flows, batch, farm = setup()
    farm.fail[Read] = [ConnectionError("gone")] * 100
    with pytest.raises(FarmUnavailable, match="did not answer for 1 s") as raised:
        drive(flows, flows.progress("b0"), farm)
    assert isinstance(raised.value.__cause__, ConnectionError) and flows.outages == 0


def test_a_chunk_that_could_not_be_sent_goes_again_at_once_as_a_plain_call(monkeypatch):
    monkeypatch.setattr("farm.client.flows.SUBMIT_CHUNK", 2)
    flows, batch, farm = setup()
    farm.fail[Send] = [ConnectionError("dropped")]
    drive(flows, flows.submit_many(batch, requests(3)), farm)
    assert farm.kinds() == ["knobs_copy", "Send", "submit_many", "submit"]


def test_a_chunk_whose_answer_was_lost_goes_again_at_once(monkeypatch):
    monkeypatch.setattr("farm.client.flows.SUBMIT_CHUNK", 2)
    flows, batch, farm = setup()
    farm.fail[InFlight] = [ConnectionError("dropped")]
    drive(flows, flows.submit_many(batch, requests(3)), farm)
    assert farm.kinds() == ["knobs_copy", "Send", "InFlight", "submit_many", "submit"]


def test_an_exchange_the_caller_spelled_is_ridden_through_an_outage_like_any():
    flows, _, farm = setup()
    farm.fail[Exchange] = [ConnectionError("gone")]
    drive(flows, flows_once(Exchange(print)), farm)
    assert farm.kinds() == ["Exchange", "Sleep", "Exchange"]


def flows_once(op):
    return (yield op)


def done(*entries) -> list:
    return [("unit:b:b0:done", list(entries))]


def result(i: int) -> tuple[str, dict]:
    return f"{i}-0", {"r": json.dumps(Result(f"r{i}", "b0", Status.OK).to_dict())}


def test_a_wait_hands_out_each_reads_results_before_it_looks_at_the_batch_again():
    flows, batch, farm = setup(results_after=done(result(1)))
    waiting = flows.waiting(batch, None)
    assert [r.request_id for r in drive(flows, waiting.round(), farm)] == ["r1"]
    assert farm.kinds() == ["results_after"] and farm.asked[0].args[2] == "0-0"  # from the stream's start


def test_a_wait_touches_its_batch_then_sweeps_every_half_lease():
    flows, batch, farm = setup(results_after=None, touch=[["open"]], sweep=[])
    waiting = flows.waiting(batch, None)
    drive(flows, waiting.round(), farm)
    farm.clock[0] = sweep_interval(SETTINGS)
    drive(flows, waiting.round(), farm)
    assert farm.kinds() == ["results_after", "touch", "knobs_copy", "sweep", "results_after"]


def test_a_wait_after_an_outage_checks_its_batch_before_the_half_lease():
    flows, batch, farm = setup(results_after=None, touch=[["open"]], sweep=[])
    waiting = flows.waiting(batch, None)
    farm.fail[Read] = [ConnectionError("gone")]
    drive(flows, waiting.round(), farm)
    drive(flows, waiting.round(), farm)
    assert farm.kinds() == ["results_after", "Sleep", "results_after", "touch", "knobs_copy", "sweep", "results_after"]


def test_a_batch_the_farm_lost_under_a_wait_is_restored_and_read_from_its_start():
    flows, batch, farm = setup(results_after=done(result(1)), touch=[["unknown"]], open=["opened"], sweep=[])
    batch.submitted.add("r1", QUEUED, None)
    waiting = flows.waiting(batch, None)
    drive(flows, waiting.round(), farm)
    farm.clock[0] = sweep_interval(SETTINGS)
    farm.replies["results_after"] = done(result(1), result(2))
    assert [r.request_id for r in drive(flows, waiting.round(), farm)] == ["r2"]
    assert farm.kinds() == ["results_after", "touch", "open", "knobs_copy", "submit", "sweep", "results_after"]
    assert farm.asked[-1].args[2] == "0-0"


def test_an_abandoned_batch_is_raised_once_its_last_results_were_handed_out():
    flows, batch, farm = setup(results_after=done(result(1), ("2-0", {"end": "abandoned", "silent_s": "9"})))
    waiting = flows.waiting(batch, None)
    assert [r.request_id for r in drive(flows, waiting.round(), farm)] == ["r1"]
    with pytest.raises(BatchAbandoned):
        drive(flows, waiting.round(), farm)
    assert waiting.over and farm.kinds() == ["results_after"]


def test_a_group_without_a_size_is_complete_once_the_whole_batch_arrived_and_its_requests_are_done():
    flows, batch, farm = setup(progress={"arrived": "8"}, groups={"a": "1"})
    tracker = GroupTracker(None)
    groups = drive(flows, flows.completed(batch, tracker, Result("r0", "b0", Status.OK, group="a")), farm)
    assert [g for g, _ in groups] == ["a"]
    assert farm.kinds() == ["progress+groups"]  # one round trip


def test_a_result_without_a_group_reads_nothing():
    flows, batch, farm = setup()
    assert drive(flows, flows.completed(batch, GroupTracker(None), Result("r0", "b0", Status.OK)), farm) == []
    assert farm.asked == []


def test_the_sweep_wakes_each_queue_it_gave_a_request_back_to_when_the_scripts_cannot():
    flows, _, farm = setup(Settings(namespace="unit", redis_url="redis://h:1/0", broker_url="amqp://rabbit//"),
                           sweep=["synthetic.compile", "synthetic.compile"])
    assert drive(flows, flows.sweep(), farm) == 2
    assert farm.kinds() == ["knobs_copy", "sweep", "Wake", "Wake"]


def test_a_tenants_client_sweeps_nothing():
    flows, _, farm = setup(Settings(namespace="unit", redis_url="redis://h:1/0", tenant=7))
    assert drive(flows, flows.sweep(), farm) == 0 and farm.asked == []


def test_a_touch_of_no_batches_asks_the_farm_nothing():
    exchanges = Exchanges(SETTINGS)
    assert run(Steps(exchanges.touch([])), lambda op: pytest.fail(f"asked {op}")) == []


def test_a_touch_checks_its_batch_ids_and_names_them_in_one_call():
    op = Steps(Exchanges(SETTINGS).touch(["b0", "b1"])).op
    assert op.script is TOUCH and op.args == ("b0,b1",)


def test_the_sweep_abandons_by_the_live_knob():
    steps = Steps(Exchanges(SETTINGS).sweep())
    steps.give(json.dumps(Knobs(abandon_after_s=30.0).to_dict()))
    assert steps.op.script is SWEEP and steps.op.arg("abandon_after_s") == "30.0"


def test_an_error_of_an_operation_is_raised_in_the_flow_where_it_asked():
    def flow():
        try:
            yield "op"
        except KeyError:
            return "caught"
    steps = Steps(flow())
    steps.fail(KeyError("x"))
    assert steps.done and steps.value == "caught"


def test_reads_together_go_in_one_pipeline_and_a_lone_read_as_itself():
    sent = []

    class Redis:
        def pipeline(self, transaction):
            sent.append(("pipeline", transaction))
            return self

        def hgetall(self, key):
            sent.append(("hgetall", key))

        def execute(self):
            return "replies"

    keys = Keys("unit")
    both = Reads((Read(reads.progress, (keys, "b0")), Read(reads.groups, (keys, "b0"))))
    assert both.on(Redis()) == "replies"
    assert sent == [("pipeline", False), ("hgetall", "unit:b:b0"), ("hgetall", "unit:b:b0:groups")]
    sent.clear()
    Read(reads.progress, (keys, "b0")).on(Redis())
    assert sent == [("hgetall", "unit:b:b0")]


def test_opening_a_batch_reads_it_back_as_its_handle_holds_it():
    head = {"task": "t", "pipeline": "synthetic", "size": "4", "arrived": "0", "done": "0", "state": "open",
            "opened_at": "1", "key": "1", "group_size": "2"}
    flows, _, farm = setup(open=["opened"], progress=head)
    info = drive(flows, flows.open("t", "synthetic", 4, "b9", 2), farm)
    assert (info.id, info.size, info.group_size) == ("b9", 4, 2)
    assert farm.asked[0].script is OPEN and farm.kinds() == ["open", "progress"]
