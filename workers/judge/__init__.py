"""Judging a response's function from another process: the tests call it across a pipe, as plain data.

`plain` (the codec both sides share), `candidate` (the script serving calls in the response's sandbox),
`check` (the tests' side, in a contained child of the worker), `raised` (the response's exceptions as
the tests see them), `arguments` (the arguments it changed, written back), `function` (`judge`: the two
processes put together, the verdict back to the worker). docs/sandbox.md says what this guarantees.
"""
