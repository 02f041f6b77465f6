"""The tests' side of a function call across processes: runs the problem's `check(candidate)` in a
contained child of the worker, where `candidate` is a stand-in that sends each call to the response's
process (a `marshal` frame of plain values: this side is trusted and marshal is what the other side
has built in) and returns the plain value that comes back (`plain.decode`: never marshal, which is
not safe against crafted bytes).

The verdict is this function's return value, which `sandbox.call` carries to the worker over a pipe
the response's process never holds. Whatever the response does (exits, prints, raises, forges lines
on the pipe, hangs), the tests see only decoded plain values, in their own process, compared by their
own code; a failure of the channel ends the check whatever the tests do with exceptions. What the
function raised reaches the tests as `raised` builds it (ordinary exceptions as themselves, anything that
could steer the tests as CandidateRaised); arguments it changed are written back (`arguments`).

Whose failure it is decides the status: anything the response caused (what it sent, raised, returned,
and whatever the tests raised because of it) is a model failure (`wrong`, `runtime_error`, `timeout`);
`infra_error` is kept for the tests failing on their own: before any call, or with an ImportError or
OSError that no exception of the response's led to. Every message is bounded (`MESSAGE_CAP`) and
quotes values with `workers.shown`, which never raises, so the verdict always fits the result pipe.
"""

from __future__ import annotations

import marshal
import os
import selectors
import time
from typing import Any

from workers.judge import plain
from workers.judge.arguments import fits, write_back
from workers.judge.raised import CandidateRaised, from_response, rebuilt
from workers.shown import clip, described, shown

__all__ = ["Candidate", "CandidateRaised", "Channel", "run_check"]

REPLY_CAP = 16 << 20  # bytes in one reply line; past it the response is wrong, not the tests
SHOWN = 300  # characters of an argument or value quoted in a message
MESSAGE_CAP = 4000  # characters of a verdict's message: it must fit the verifier's output cap, whatever was sent


class _Ended(BaseException):
    """The channel failed (the response went away, hung, sent something that is not a reply): the check
    is over. A BaseException so that a test's `except Exception` does not swallow it; the verdict does
    not depend on it propagating either (`Candidate.ended` is read first)."""


class Channel:
    """Lines of plain data to and from the response's process, each read bounded by the deadline."""

    def __init__(self, in_fd: int, out_fd: int, deadline: float) -> None:
        self.in_fd, self.out_fd, self.deadline = in_fd, out_fd, deadline
        self._buffer = bytearray()
        self._searched = 0  # bytes of the buffer already searched for a newline: each byte is searched once
        self._selector = selectors.DefaultSelector()
        self._selector.register(in_fd, selectors.EVENT_READ)

    def send(self, frame: bytes) -> None:
        view = memoryview(len(frame).to_bytes(8, "big") + frame)
        while view:
            view = view[os.write(self.out_fd, view):]  # EPIPE: the response is gone (caught by the caller)

    def receive(self) -> bytes | None:
        """The next line; None at end of file; raises TimeoutError past the deadline, OverflowError past
        REPLY_CAP."""
        while True:
            end = self._buffer.find(b"\n", self._searched)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                self._searched = 0
                return line
            self._searched = len(self._buffer)
            if len(self._buffer) > REPLY_CAP:
                raise OverflowError(f"a reply longer than {REPLY_CAP >> 20} MiB")
            left = self.deadline - time.monotonic()
            if left <= 0 or not self._selector.select(timeout=left):
                raise TimeoutError
            chunk = os.read(self.in_fd, 1 << 16)
            if not chunk:
                return None
            self._buffer += chunk


class Candidate:
    """What the tests call in place of the response's function."""

    def __init__(self, channel: Channel, entry_point: str, time_limit_s: float) -> None:
        self.channel, self.entry_point, self.time_limit_s = channel, entry_point, time_limit_s
        self.calls = 0
        self.last: str = ""  # the last call and what came back, for the message
        self.ended: dict[str, Any] | None = None  # set once the channel failed: the verdict

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.ended is not None:
            raise _Ended()
        self.calls += 1
        call = _call_text(self.entry_point, args, kwargs)
        try:
            plain.encode((args, kwargs), plain.ARGUMENT_DEPTH)  # the same rule both ways, though marshal carries it
            frame = marshal.dumps((args, kwargs))
        except (plain.NotPlain, ValueError) as exc:
            self._end("infra_error", f"the tests pass {call}, which cannot cross as plain data ({exc})")
        try:
            value, raised = self._answer(call, frame, (args, kwargs))
        except _Ended:
            raise
        except Exception as exc:  # noqa: BLE001 - a reply too big to handle (MemoryError): the response's
            self._end("wrong", f"{call} sent back a reply that could not be read ({described(exc, SHOWN)})")
        if raised is not None:
            raise raised
        return value

    def _answer(self, call: str, frame: bytes, sent: tuple[tuple, dict]) -> tuple[Any, Exception | None]:
        """The call's return value, or the exception the tests see; ends the check on anything else."""
        message = self._reply(call, frame)
        kind = message[0] if type(message) is tuple and message and type(message[0]) is str else None
        if kind == "unplain" and len(message) == 2:
            self._end("wrong", f"{call} sent back something that is not plain data: {shown(message[1], SHOWN)}")
        if kind == "value" and len(message) == 3 and type(message[2]) is bool:
            self._moved(call, sent, message[2])
            self.last = f"{call} returned {shown(message[1], SHOWN)}"
            return message[1], None
        if kind == "raised" and len(message) == 4 and type(message[1]) is str and type(message[2]) is str \
                and type(message[3]) is bool:
            self._moved(call, sent, message[3])
            self.last = f"{call} raised {clip(message[2], SHOWN)}"
            return None, rebuilt(message[1], message[2])
        self._end("wrong", f"{call} sent back {shown(message, SHOWN)}, which is not a reply")

    def _reply(self, call: str, frame: bytes) -> Any:
        """The next decoded line from the response's process; `frame`, if any, sent first."""
        try:
            if frame:
                self.channel.send(frame)
            line = self.channel.receive()
        except TimeoutError:  # before OSError, of which it is a subclass
            self._end("timeout", f"{call} did not return within the {self.time_limit_s:g} s time limit")
        except OSError:  # EPIPE on send, an error on read: the response's process is gone
            line = None
        except OverflowError as exc:
            self._end("wrong", f"{call} sent back {exc}")
        if line is None:
            self._end("runtime_error", f"the response's process ended during call {self.calls}, {call}")
        try:
            return plain.decode(line)
        except plain.NotPlain as exc:
            self._end("wrong", f"{call} sent back something that is not plain data ({clip(str(exc), SHOWN)})")

    def _moved(self, call: str, sent: tuple[tuple, dict], moved: bool) -> None:
        """The arguments as the call left them, written back into the tests' own objects."""
        if not moved:
            return
        came = self._reply(call, b"")  # nested no deeper than a value, so the tests may pass it on as one
        if not fits(sent, came):
            self._end("wrong", f"{call} sent back {shown(came, SHOWN)} as its arguments, which are not")
        write_back(sent, came)

    def _end(self, status: str, message: str) -> None:
        if self.ended is None:
            self.ended = {"status": status, "message": message}
        raise _Ended()


def _call_text(entry: str, args: tuple, kwargs: dict) -> str:
    inner = ", ".join([*(shown(a, SHOWN) for a in args), *(f"{k}={shown(v, SHOWN)}" for k, v in kwargs.items())])
    return f"{entry}({clip(inner, SHOWN)})"


def run_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in the contained child: the verdict on the response behind the pipes `spec` names."""
    verdict = _check(spec)
    verdict["message"] = clip(verdict.get("message", ""), MESSAGE_CAP)
    return verdict


def _check(spec: dict[str, Any]) -> dict[str, Any]:
    channel = Channel(spec["in_fd"], spec["out_fd"], spec["deadline"])
    try:
        first = channel.receive()
    except TimeoutError:
        return {"status": "timeout", "message": f"the response was not loaded within the {spec['time_limit_s']:g} s time limit"}
    except OverflowError as exc:
        return {"status": "wrong", "message": f"the response's process sent {exc} before its function was ready"}
    except OSError:
        first = None
    if first is None:
        return {"status": "runtime_error", "message": "the response's process ended before its function was ready",
                "gone": True}
    try:
        hello = plain.decode(first)
    except plain.NotPlain:
        hello = None
    if hello != ("ready",):
        return _not_ready(hello, spec["entry_point"])
    candidate = Candidate(channel, spec["entry_point"], spec["time_limit_s"])
    scope: dict[str, Any] = {"__name__": "__check__"}
    try:  # the tests' module may call the function too: all of it runs under the same verdict
        exec(compile(spec["prompt"], "prompt.py", "exec"), scope)  # helpers the tests use (HumanEval/32's poly)
        scope[spec["entry_point"]] = candidate  # tests that name the function mean the response's (HumanEval/33)
        exec(compile(spec["test"], "check.py", "exec"), scope)
        scope["check"](candidate)
    except _Ended:
        pass
    except BaseException as exc:  # noqa: BLE001 - the tests' outcome, whatever they raised
        if candidate.ended is None:
            return _raised(exc, candidate)
    if candidate.ended is not None:
        return {**candidate.ended, "calls": candidate.calls, "gone": candidate.ended["status"] == "runtime_error"}
    if candidate.calls == 0:
        return {"status": "infra_error", "message": "check() never called the function: the problem tests nothing"}
    return {"status": "ok", "message": "", "calls": candidate.calls}


def _raised(exc: BaseException, candidate: Candidate) -> dict[str, Any]:
    """The verdict when the tests ended with `exc`: whose failure it is decides the status."""
    calls, after = candidate.calls, _after(candidate)
    if calls == 0:  # nothing of the response's has reached the tests yet: they failed on their own
        return {"status": "infra_error", "message": f"the tests failed before calling the function: "
                f"{described(exc, SHOWN)}"}
    if from_response(exc):
        return {"status": "runtime_error", "message": f"check ended with {described(exc, SHOWN)}, raised by the "
                f"function{after}", "calls": calls}
    if isinstance(exc, AssertionError):
        said = described(exc, SHOWN).removeprefix(type(exc).__name__).removeprefix(": ")
        return {"status": "wrong", "message": f"an assertion failed{f' ({said})' if said else ''}{after}",
                "calls": calls}
    if isinstance(exc, TimeoutError):  # the tests' own time limit on a call (a timeout decorator)
        return {"status": "timeout", "message": f"the tests gave up waiting: {described(exc, SHOWN)}{after}",
                "calls": calls}
    if isinstance(exc, (ImportError, OSError)):  # the tests' own environment, not the response
        return {"status": "infra_error", "message": f"the tests could not run: {described(exc, SHOWN)}"}
    return {"status": "runtime_error", "message": f"check raised {described(exc, SHOWN)}{after}", "calls": calls}


def _after(candidate: Candidate) -> str:
    return f" after {candidate.last}" if candidate.last else ""


def _not_ready(hello: Any, entry: str) -> dict[str, Any]:
    kind = hello[0] if type(hello) is tuple and len(hello) == 2 and type(hello[1]) is str else None
    if kind == "compile_error":
        return {"status": "compile_error", "message": f"syntax error:\n{clip(hello[1], 2000)}"}
    if kind == "load_raised":
        return {"status": "runtime_error", "message": f"the response raised while being loaded: {clip(hello[1], 2000)}"}
    if kind == "missing":
        return {"status": "wrong", "message": clip(hello[1], SHOWN)}
    return {"status": "wrong",
            "message": f"the response's process did not load {entry!r} (it sent {shown(hello, SHOWN)})"}
