"""The tests' side of a function call across processes: runs the problem's `check(candidate)` in a
contained child of the worker, where `candidate` is a stand-in that sends each call to the response's
process (a `marshal` frame of plain values: this side is trusted and marshal is what the other side
has built in) and returns the plain value that comes back (`plain.decode`: never marshal, which is
not safe against crafted bytes).

The verdict is this function's return value, which `sandbox.call` carries to the worker over a pipe
the response's process never holds. Whatever the response does (exits, prints, raises, forges lines
on the pipe, hangs), the tests see only decoded plain values, in their own process, compared by their
own code; a failure of the channel ends the check whatever the tests do with exceptions.
"""

from __future__ import annotations

import builtins
import marshal
import os
import selectors
import time
from typing import Any

from workers.judge import plain

REPLY_CAP = 16 << 20  # bytes in one reply line; past it the response is wrong, not the tests
SHOWN = 300  # characters of an argument or value quoted in a message


class _Ended(BaseException):
    """The channel failed (the response went away, hung, sent something that is not a reply): the check
    is over. A BaseException so that a test's `except Exception` does not swallow it; the verdict does
    not depend on it propagating either (`Candidate.ended` is read first)."""


class CandidateRaised(Exception):
    """The response's function raised something that is not a builtin exception type."""


class Channel:
    """Lines of plain data to and from the response's process, each read bounded by the deadline."""

    def __init__(self, in_fd: int, out_fd: int, deadline: float) -> None:
        self.in_fd, self.out_fd, self.deadline = in_fd, out_fd, deadline
        self._buffer = bytearray()
        self._selector = selectors.DefaultSelector()
        self._selector.register(in_fd, selectors.EVENT_READ)

    def send(self, frame: bytes) -> None:
        view = memoryview(len(frame).to_bytes(8, "big") + frame)
        while view:
            view = view[os.write(self.out_fd, view):]  # EPIPE: the response is gone (caught by the caller)

    def receive(self) -> bytes | None:
        """The next line; None at end of file; raises TimeoutError past the deadline."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                return line
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
        shown = _call_text(self.entry_point, args, kwargs)
        try:
            plain.encode((args, kwargs))  # the same rule both ways, though marshal carries the call
            frame = marshal.dumps((args, kwargs))
        except (plain.NotPlain, ValueError) as exc:
            self._end("infra_error", f"the tests pass {shown}, which cannot cross as plain data ({exc})")
        try:
            self.channel.send(frame)
            reply = self.channel.receive()
        except TimeoutError:  # before OSError, of which it is a subclass
            self._end("timeout", f"{shown} did not return within the {self.time_limit_s:g} s time limit")
        except OSError:  # EPIPE on send, an error on read: the response's process is gone
            reply = None
        except OverflowError as exc:
            self._end("wrong", f"{shown} sent back {exc}")
        if reply is None:
            self._end("runtime_error", f"the response's process ended during call {self.calls}, {shown}")
        try:
            message = plain.decode(reply)
        except plain.NotPlain as exc:
            self._end("wrong", f"{shown} sent back something that is not plain data ({exc})")
        kind = message[0] if type(message) is tuple and message and type(message[0]) is str else None
        if kind == "value" and len(message) == 2:
            self.last = f"{shown} returned {_shown(message[1])}"
            return message[1]
        if kind == "raised" and len(message) == 3 and all(type(x) is str for x in message[1:]):
            self.last = f"{shown} raised {message[2][-SHOWN:]}"
            raise _exception(message[1], message[2])
        if kind == "unplain" and len(message) == 2:
            self._end("wrong", f"{shown} returned something that is not plain data: {str(message[1])[:SHOWN]}")
        self._end("wrong", f"{shown} sent back {_shown(message)}, which is not a reply")

    def _end(self, status: str, message: str) -> None:
        if self.ended is None:
            self.ended = {"status": status, "message": message}
        raise _Ended()


def _exception(name: str, text: str) -> Exception:
    """A builtin Exception type by name (tests may expect a ValueError), else CandidateRaised; never a
    BaseException-only type: a response cannot raise SystemExit into the tests."""
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
        try:
            return kind(text)
        except TypeError:  # a type whose constructor wants more (UnicodeDecodeError)
            pass
    return CandidateRaised(text)


def _shown(value: Any) -> str:
    text = repr(value)  # plain values only: repr is ours, not the response's
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def _call_text(entry: str, args: tuple, kwargs: dict) -> str:
    inner = ", ".join([*(_shown(a) for a in args), *(f"{k}={_shown(v)}" for k, v in kwargs.items())])
    return f"{entry}({inner if len(inner) <= SHOWN else inner[:SHOWN] + '...'})"


def run_check(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in the contained child: the verdict on the response behind the pipes `spec` names."""
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
    exec(compile(spec["prompt"], "prompt.py", "exec"), scope)  # helpers the tests use (HumanEval/32's poly)
    scope[spec["entry_point"]] = candidate  # tests that name the function mean the response's (HumanEval/33)
    exec(compile(spec["test"], "check.py", "exec"), scope)
    try:
        scope["check"](candidate)
    except _Ended:
        pass
    except AssertionError:
        if candidate.ended is None:
            return {"status": "wrong", "message": f"an assertion failed{_after(candidate)}", "calls": candidate.calls}
    except (ImportError, OSError) as exc:  # the tests' own environment, not the response
        if candidate.ended is None:
            return {"status": "infra_error", "message": f"the tests could not run: {exc!r}"}
    except BaseException as exc:  # noqa: BLE001 - the tests' outcome, whatever they raised
        if candidate.ended is None:
            return {"status": "runtime_error", "message": f"check raised {type(exc).__name__}: {str(exc)[:SHOWN]}"
                    f"{_after(candidate)}", "calls": candidate.calls}
    if candidate.ended is not None:
        return {**candidate.ended, "calls": candidate.calls, "gone": candidate.ended["status"] == "runtime_error"}
    if candidate.calls == 0:
        return {"status": "infra_error", "message": "check() never called the function: the problem tests nothing"}
    return {"status": "ok", "message": "", "calls": candidate.calls}


def _after(candidate: Candidate) -> str:
    return f" after {candidate.last}" if candidate.last else ""


def _not_ready(hello: Any, entry: str) -> dict[str, Any]:
    kind = hello[0] if type(hello) is tuple and len(hello) == 2 and type(hello[1]) is str else None
    if kind == "compile_error":
        return {"status": "compile_error", "message": f"syntax error:\n{hello[1]}"}
    if kind == "load_raised":
        return {"status": "runtime_error", "message": f"the response raised while being loaded: {hello[1]}"}
    if kind == "missing":
        return {"status": "wrong", "message": hello[1]}
    return {"status": "wrong", "message": f"the response's process did not load {entry!r} (it sent {_shown(hello)})"}
