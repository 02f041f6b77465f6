"""Admission of 1 MiB payloads, hostile and honest, for every pipeline: milliseconds per payload, same run.

    python bench/admission.py [--runs 7] [--bytes 1048576] [--only math] [--stages] [--json]

Admission runs in the trainer's client (`farm.protocol.calls.admit`: the payload's canonical JSON, its size
check, then `Pipeline.checked_admit`, the pipeline's own `admit`), so a response crafted to be slow to read would
stall a trainer. Each family fills a payload to just under `--bytes` of canonical JSON (FARM_MAX_PAYLOAD_BYTES,
1 MiB by default) with one shape of text: a hostile one (long runs of blanks, newlines, backticks, tildes, braces,
backslashes, `\\boxed{` openings, repeated answer phrases, `#include` lines, unclosed fences, deep nesting, ...)
or an honest one (a long solution, long reasoning ending in a box, a big test set or expected output) as the
baseline. Families are timed round-robin, `--runs` times each, so a load change on a shared machine hits all;
the per-process caches of what a response holds are emptied before each run (a client admits a payload once).

Printed per family: the payload's size, the median and the worst of its runs of `checked_admit`, the median of
the client's whole admission (`+json`: with the canonical JSON, which any client pays to send the payload), and
what admission decided; per pipeline, the honest median and the worst hostile family with its ratio to it; and
the target: the pipeline's admission of a 1 MiB payload takes at most 50 ms in every run of every family (the
exit status is 1 when one misses it). `--stages` also times what stages read again of such payloads (code's
`plan`, cuda's kernel, math's answer): the first read in a process and the next, cached.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from farm import registry  # noqa: E402
from farm.config import Settings  # noqa: E402
from farm.pipeline import InvalidInput  # noqa: E402
from farm.protocol.calls import admit, canonical_json  # noqa: E402

TARGET_MS = 50.0
Build = Callable[[str], dict[str, Any]]  # the response (or code) text -> the payload


def filled(build: Build, unit: str, head: str = "", tail: str = "", size: int = 1 << 20) -> dict[str, Any]:
    """`build(head + unit * k + tail)` with the largest k whose canonical JSON fits in `size` bytes."""
    base = len(canonical_json(build(head + tail)).encode())
    k = max(0, (size - base) // (len(canonical_json(unit).encode()) - 2))
    return build(head + unit * k + tail)


def _math(text: str) -> dict[str, Any]:
    return {"response": text, "answer": "42"}


def _code(text: str) -> dict[str, Any]:
    return {"response": text, "tests": [{"input": "1 2\n", "output": "3\n"}]}


def _cpp(text: str) -> dict[str, Any]:
    return {**_code(text), "language": "cpp"}


HARNESS = "#include <cstdio>\n__global__ void add(const float*, const float*, float*, int);\nint main() { return 0; }\n"


def _cuda(text: str) -> dict[str, Any]:
    return {"response": text, "harness": HARNESS, "expected_output": [3.0, 5.0]}


def _cuda_harness(text: str) -> dict[str, Any]:
    return {"response": "```cuda\n__global__ void add() {}\n```", "harness": text, "expected_output": [1.0]}


def _run_code(text: str) -> dict[str, Any]:
    return {"code": text, "language": "python", "stdin": ""}


SOLUTION = "def solve(a, b):\n    # add the two numbers, as the statement asks\n    return a + b\n\n"
REASONING = "We substitute $x = \\frac{a}{b}$ and simplify: $\\frac{x^{2}+1}{x} = \\sqrt{\\frac{4}{9}}$, so ... "
KERNEL = "__global__ void add(const float* a, const float* b, float* c, int n) {\n    int i = threadIdx.x;\n}\n"


def families(size: int) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(pipeline, family, 'honest' or 'hostile', payload), each payload filled to `size` bytes of JSON."""
    def f(build: Build, unit: str, head: str = "", tail: str = "") -> dict[str, Any]:
        return filled(build, unit, head, tail, size)

    honest, hostile = "honest", "hostile"
    return [
        ("code", "a long solution in a python fence", honest, f(_code, SOLUTION, "Here it is:\n```python\n", "```\n")),
        ("code", "prose, then C++ in an untagged fence", honest,
         f(_code, "We keep a running sum of the inputs. ", "", "\n```\n#include <cstdio>\nint main(){}\n```\n")),
        ("code", "a big inline test set", honest,
         {"response": "```python\nprint(sum(map(int, input().split())))\n```",
          "tests": [{"input": "1 2 " * 1000 + "\n", "output": "3 " * 1000 + "\n"}] * ((size - 200) // 6030)}),
        ("code", "an inline test set of tiny cases", honest,
         {"response": "```python\nprint(sum(map(int, input().split())))\n```",
          "tests": [{"input": "1 2\n", "output": "3\n"}] * ((size - 200) // 33)}),
        ("code", "blanks after an untagged fence", hostile, f(_code, " ", "```\n")),
        ("code", "blank lines in an untagged fence", hostile, f(_code, "\n", "```\n")),
        ("code", "blank lines then code, no fence (cpp)", hostile, f(_cpp, "\n", "", "int main() {}")),
        ("code", "a run of backticks", hostile, f(_code, "`")),
        ("code", "a run of tildes", hostile, f(_code, "~")),
        ("code", "fence lines", hostile, f(_code, "```\n")),
        ("code", "fences with a backtick in the info", hostile, f(_code, "```x`\n")),
        ("code", "blanks between a fence and a backtick", hostile, f(_code, " ", "```", "`")),
        ("code", "unclosed python fences", hostile, f(_code, "```python\n")),
        ("code", "indented fence lines", hostile, f(_code, "    ~~~\n")),
        ("code", "a 64-backtick fence then short ones", hostile, f(_code, "```\n", "`" * 70 + "\n")),
        ("code", "#include mid-line", hostile, f(_code, "x#include <a>\n")),
        ("code", "#include after blanks on one line", hostile, f(_code, " #include <a>")),
        ("code", "int floods", hostile, f(_code, "int ")),
        ("code", "int main( mid-word (cpp)", hostile, f(_cpp, "xint main(")),
        ("math", "long reasoning ending in a box", honest, f(_math, REASONING, "", "\nSo \\boxed{42}.")),
        ("math", "GSM8K steps and a #### line", honest, f(_math, "Step: 3 + 4 = 7 apples.\n", "", "#### 42")),
        ("math", "'Answer: x', blanks, 'y'", hostile, f(_math, " ", "Answer: x", "y")),
        ("math", "'the answer is x', blanks, 'y'", hostile, f(_math, " ", "the answer is x", "y")),
        ("math", "'#### x', blanks, 'y'", hostile, f(_math, " ", "#### x", "y")),
        ("math", "'final answer is x', blanks, 'y'", hostile, f(_math, " ", "The final answer is x", "y")),
        ("math", "non-ASCII reasoning ending in 'Answer:'", honest,
         f(_math, "Since π ≤ x ≤ 2π, the angle is θ = π/3. ", "", "\nAnswer: 42")),
        ("math", "blank lines", hostile, f(_math, "\n")),
        ("math", "blank lines then an answer line", hostile, f(_math, "\n", "", "Answer: 42")),
        ("math", "\\boxed{ openings", hostile, f(_math, "\\boxed{")),
        ("math", "boxes", hostile, f(_math, "\\boxed{1}")),
        ("math", "nested boxes", hostile, f(_math, "\\boxed{", "", "42")),
        ("math", "a chain of boxes in boxes", hostile, f(_math, "\\boxed{\\boxed{x} ")),
        ("math", "braces in one box", hostile, f(_math, "{}", "\\boxed{", "}")),
        ("math", "an open brace run in one box", hostile, f(_math, "{", "\\boxed{")),
        ("math", "backslashes", hostile, f(_math, "\\")),
        ("math", "tildes in two different boxes", hostile, f(_math, "~", "\\boxed{1}\\boxed{2", "}")),
        ("math", "'answer is' repeated", hostile, f(_math, "answer is ")),
        ("math", "'Answer:' lines", hostile, f(_math, "Answer:\n")),
        ("math", "'#### 1' lines", hostile, f(_math, "#### 1\n")),
        ("math", "a run of #", hostile, f(_math, "#")),
        ("math", "'final answer:' repeated", hostile, f(_math, "final answer: ")),
        ("math", "'anſwer' (folds to answer) repeated", hostile, f(_math, "anſwer is ")),
        ("cuda", "a kernel in a cuda fence", honest, f(_cuda, "// " + "x" * 70 + "\n", "```cuda\n" + KERNEL, "```")),
        ("cuda", "a big expected output", honest,
         {"response": "```cuda\n" + KERNEL + "```", "expected_output": [1.5] * ((size - 300) // 4)}),
        ("cuda", "a big expected output as text", honest,
         {"response": "```cuda\n" + KERNEL + "```", "expected_output": "1.5 " * ((size - 300) // 4)}),
        ("cuda", "blank lines then __global__, no fence", hostile, f(_cuda, "\n", "", "__global__ void k() {}")),
        ("cuda", "blanks then __global__, no fence", hostile, f(_cuda, " ", "", "__global__ void k() {}")),
        ("cuda", "an empty fence, blank lines, __global__", hostile, f(_cuda, "\n", "```\n", "```\n__global__ x")),
        ("cuda", "a harness of blank lines", hostile, f(_cuda_harness, "\n")),
        ("cuda", "a harness of # lines", hostile, f(_cuda_harness, "#\n")),
        ("run_code", "a long program", honest, f(_run_code, SOLUTION)),
        ("run_code", "blank lines", hostile, f(_run_code, "\n")),
        ("run_code", "1 MiB of files", honest,
         {"code": "print(1)", "language": "python", "files": {f"d/{i}.bin": "QUJD" * ((size - 100) // 256 - 5)
                                                             for i in range(64)}}),
        ("synthetic", "many unknown stage names", hostile,
         {"times": {f"s{i}": 1 for i in range((size - 100) // 14)}}),
    ]


def _forget() -> None:
    """Empty the per-process caches of what a response holds: a client admits each payload once."""
    from workers.pipelines import code, cuda

    code._chosen.cache_clear()
    cuda._kernel.cache_clear()


def time_admission(pipeline, payload: dict[str, Any], settings: Settings) -> tuple[float, float, str]:
    """(the pipeline's admission ms, the client's whole admission ms: with the canonical JSON, what it decided)."""
    _forget()
    start = time.perf_counter()
    try:
        pipeline.checked_admit(payload)
    except InvalidInput:
        pass
    checked = (time.perf_counter() - start) * 1000
    _forget()
    start = time.perf_counter()
    admitted = admit(settings, pipeline, "bench", payload, None)
    whole = (time.perf_counter() - start) * 1000
    return checked, whole, ",".join(admitted.stages) if admitted.stages else admitted.status.value


def stage_costs(runs: int, size: int) -> list[tuple[str, float, float]]:
    """(what, first read ms, cached read ms): what each stage reads again of a 1 MiB payload."""
    from workers.pipelines import code, cuda, math

    readers = [("code.plan, a long python solution", code.plan, code._chosen, filled(_code, SOLUTION, size=size)),
               ("code.plan, blank lines then int main (cpp)", code.plan, code._chosen,
                filled(_cpp, "\n", tail="int main(", size=size)),
               ("cuda kernel, blank lines then __global__", cuda._code, cuda._kernel,
                filled(_cuda, "\n", tail="__global__", size=size)),
               ("math answer, long reasoning and a box", math._answers, None,
                filled(_math, REASONING, tail="\\boxed{42}", size=size))]
    out = []
    for what, read, cache, payload in readers:
        first, cached = [], []
        for _ in range(runs):
            if cache is not None:
                cache.cache_clear()
            fresh = json.loads(json.dumps(payload))  # a stage decodes its own copy of the payload
            start = time.perf_counter()
            read(fresh)
            first.append((time.perf_counter() - start) * 1000)
            again = json.loads(json.dumps(payload))  # the next stage, in the same process
            start = time.perf_counter()
            read(again)
            cached.append((time.perf_counter() - start) * 1000)
        out.append((what, statistics.median(first), statistics.median(cached)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--bytes", type=int, default=1 << 20, help="payload size (canonical JSON), default 1 MiB")
    ap.add_argument("--only", help="one pipeline's families")
    ap.add_argument("--stages", action="store_true", help="also time what stages read again")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    settings = Settings(max_payload_bytes=args.bytes)
    rows = [r for r in families(args.bytes) if not args.only or r[0] == args.only]
    pipelines = {name: registry.get(name) for name, *_ in rows}
    times: list[list[float]] = [[] for _ in rows]
    wholes: list[list[float]] = [[] for _ in rows]
    decided: list[str] = [""] * len(rows)
    for _ in range(args.runs):
        for i, (name, _, _, payload) in enumerate(rows):
            checked, whole, decided[i] = time_admission(pipelines[name], payload, settings)
            times[i].append(checked)
            wholes[i].append(whole)
    report = []
    for (name, family, kind, payload), runs, whole, verdict in zip(rows, times, wholes, decided):
        report.append({"pipeline": name, "family": family, "kind": kind, "bytes": len(canonical_json(payload).encode()),
                       "decided": verdict, "median_ms": statistics.median(runs), "worst_ms": max(runs),
                       "with_json_median_ms": statistics.median(whole)})
    worst = max(report, key=lambda r: r["worst_ms"])
    holds = worst["worst_ms"] <= TARGET_MS
    if args.json:
        print(json.dumps({"families": report, "target_ms": TARGET_MS, "holds": holds}, indent=1))
        return 0 if holds else 1
    print(f"{'pipeline':9} {'kind':7} {'family':44} {'bytes':>8} {'median ms':>9} {'worst ms':>8} "
          f"{'+json ms':>8}  decided")
    for r in report:
        print(f"{r['pipeline']:9} {r['kind']:7} {r['family'][:44]:44} {r['bytes']:8d} {r['median_ms']:9.2f} "
              f"{r['worst_ms']:8.2f} {r['with_json_median_ms']:8.2f}  {r['decided'][:40]}")
    print()
    for name in dict.fromkeys(r["pipeline"] for r in report):
        mine = [r for r in report if r["pipeline"] == name]
        base = [r["median_ms"] for r in mine if r["kind"] == "honest"]
        bad = max((r for r in mine if r["kind"] == "hostile"), key=lambda r: r["worst_ms"], default=None)
        line = f"{name:9} honest median {statistics.median(base):6.2f} ms" if base else f"{name:9} (no honest family)"
        if bad:
            ratio = f" ({bad['worst_ms'] / statistics.median(base):.1f}x honest)" if base else ""
            line += f"; worst hostile {bad['worst_ms']:6.2f} ms{ratio}: {bad['family']}"
        print(line)
    print(f"\ntarget: admitting a {args.bytes >> 10} KiB payload takes at most {TARGET_MS:g} ms: "
          f"{'holds' if holds else 'MISSED'} (worst {worst['worst_ms']:.2f} ms, {worst['pipeline']}: "
          f"{worst['family']})")
    if args.stages:
        print("\nwhat a stage reads again (median ms): first read / cached in the same process")
        for what, first, cached in stage_costs(args.runs, args.bytes):
            print(f"  {what:48} {first:8.2f} / {cached:6.2f}")
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
