"""The response's side of a function call across processes: run as a script in the response's sandbox.

    python3 -I -S candidate.py IN_FD OUT_FD ENTRY_POINT

It loads `solution.py` (the problem's prompt and the response's code), finds ENTRY_POINT and then
answers calls. A call comes in as one frame (8-byte big-endian length, then `marshal` of `(args,
kwargs)`: the tests are trusted, and marshal is built in); each reply goes out as one line of plain
data (`plain.encode`): `("value", result, moved)`, `("raised", type_name, message, moved)` or
`("unplain", why)`. `moved` says whether the call changed its arguments; if it did, the next line is
`(args, kwargs)` as the call left them, for the tests to write back into their own objects (under
HumanEval's own harness the function runs in the tests' process, where a mutation is seen). Before the
first call one line says `("ready",)`, `("compile_error", text)`, `("load_raised", text)` or
`("missing", text)`.

Nothing here is trusted by the tests: the response shares this process and may rewrite any of it.
What the tests see is what their decoder makes of the bytes on the pipe, plain values only. It
imports only what the interpreter has built in (start-up time is per request), and `plain.py` from
the same directory.
"""

import marshal
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plain  # noqa: E402

LIMIT = 2000  # characters of an error's text sent back


def _send(fd, message):
    _write(fd, plain.encode(message) + "\n")


def _write(fd, lines):
    view = memoryview(lines.encode("utf-8"))  # plain escapes the surrogates UTF-8 cannot carry
    while view:
        view = view[os.write(fd, view):]


def _describe(exc):
    try:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__  # a SyntaxError names its line
    except BaseException:  # a hostile __str__; the name is enough
        text = type(exc).__name__
    return text[-LIMIT:]


def _frames(fd):
    """The calls: each a length and that many bytes; ends when the tests close their end."""
    reader = os.fdopen(fd, "rb")
    while True:
        head = reader.read(8)
        if len(head) < 8:
            return
        yield marshal.loads(reader.read(int.from_bytes(head, "big")))


def _silence():
    """The response's prints go nowhere: nothing it writes to stdout or stderr is read by anyone."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def main():
    in_fd, out_fd, entry = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    _silence()
    try:
        with open("solution.py", encoding="utf-8") as fh:
            code = compile(fh.read(), "solution.py", "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError) as exc:  # nested too deep
        _send(out_fd, ("compile_error", _describe(exc)))
        return
    scope = {"__name__": "solution", "__builtins__": __builtins__}
    try:
        exec(code, scope)
    except BaseException as exc:  # SystemExit too: a response that exits while loading has failed
        _send(out_fd, ("load_raised", _describe(exc)))
        return
    function = scope.get(entry)
    if not callable(function):
        _send(out_fd, ("missing", f"the response defines no function named {entry!r}"))
        return
    _send(out_fd, ("ready",))
    for args, kwargs in _frames(in_fd):
        before = _state(args, kwargs)
        try:
            result = function(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt: all are the call's outcome
            _reply(out_fd, ("raised", type(exc).__name__, _describe(exc)), args, kwargs, before)
            continue
        _reply(out_fd, ("value", result), args, kwargs, before)


def _state(args, kwargs):
    """The arguments' bytes, to tell whether the call changed them (marshal version 2: no references, so
    the bytes do not depend on who else holds an object); None when they no longer marshal (a cycle)."""
    try:
        return marshal.dumps((args, kwargs), 2)
    except Exception:  # noqa: BLE001 - ValueError: the call made them unmarshallable, so they changed
        return None


def _reply(fd, outcome, args, kwargs, before):
    """The outcome, flagged with whether the arguments changed; if they did, they follow on the next line."""
    now = _state(args, kwargs)
    moved = now is None or now != before
    try:
        lines = plain.encode((*outcome, moved)) + "\n"
    except plain.NotPlain as exc:
        _send(fd, ("unplain", f"its return value: {exc}"))
        return
    if moved:
        try:
            lines += plain.encode((args, kwargs)) + "\n"  # as deep as a value: the tests may nest it again
        except plain.NotPlain as exc:
            _send(fd, ("unplain", f"an argument, as the call left it: {exc}"))
            return
    _write(fd, lines)


if __name__ == "__main__":
    main()
