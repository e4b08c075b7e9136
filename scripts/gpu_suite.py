"""The GPU suites: each a named list of commands (specviz's own command line, a tool under scripts/, the CUDA
tests), run one after another on a GPU machine from the repository's root, with no install. Each command's
output goes to OUT/STEP.log and its results to OUT (default /tmp/out); OUT/gpu.txt records the card and the
versions. --dry-run prints the commands instead (any machine; nothing is written).

    python -m scripts.gpu_suite --list                         # the suites and what each measures
    python -m scripts.gpu_suite identity                       # float32, 26 prompts: each method's output = plain's
    python -m scripts.gpu_suite headline --methods eagle:6:31,medusa:4 --part 1/3   # a third of the 480 prompts
    python -m scripts.gpu_suite exactness-device --only medusa-top-p,retrieval-tree  # some steps of a suite
    python -m scripts.gpu_suite identity --per-category 1 --max-new-tokens 8 --device cpu   # the suite itself, anywhere

--methods, --per-category (0: every prompt), --prompts, --part K/N (the Kth of N slices of the prompt file, for
a call's time limit), --max-new-tokens and --device change a suite's bench commands; --only runs some of its steps.
The default model is the file staged at /root/specviz-gpu (docs/gpu.md) where it is there, else the package's.
Every command is checked against its tool's own argument parser before the first one runs.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGED = "/root/specviz-gpu/SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS = "data/spec_bench/question.jsonl"
# progress bars and load messages: kept in the log, left out of what the call prints
NOISE = re.compile(r"Converting|Loading weights|bench:|clean_up_tokenization|/s\]$|^\s*$")


@dataclasses.dataclass(frozen=True)
class Step:
    """One command of a suite. tool: "specviz" (python -m specviz), "scripts.NAME" or "pytest". In args, {out}
    is the results folder and {part} the prompt slice's suffix ("" for all prompts)."""
    name: str
    tool: str
    args: tuple[str, ...]
    seconds: int | None = None  # stopped after this long (exit 124), so that a call keeps the steps after it
    env: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class Suite:
    about: str
    steps: tuple[Step, ...]
    parallel: bool = False  # every step at once (each its own process; most of their time is the host's)


def bench(name: str, dtype: str, methods: str, *more: str, seconds: int | None = None) -> Step:
    """A `specviz bench` over Spec-Bench's prompts, 256 new tokens; the distilled draft model for `draft`."""
    return Step(name, "specviz", ("bench", "--prompts", PROMPTS, "--max-new-tokens", "256", "--dtype", dtype,
                                  "--methods", methods, *more, "--out", "{out}/%s{part}.json" % name), seconds)


def figures(name: str) -> Step:
    """What a step of each method costs (drafting, verify, the rest), from the bench step `name`'s report."""
    return Step(f"{name}-figures", "scripts.step_figures", ("{out}/%s{part}.json" % name,))


def exact(name: str, *args: str, seconds: int = 540) -> Step:
    """check-exactness in float32 on the GPU, 3,000 samples and as many for the control."""
    return Step(name, "specviz", ("check-exactness", "--device", "cuda", "--dtype", "float32", "--samples", "3000",
                                  *args), seconds)


CUDA_TESTS = ("tests/test_runners.py", "tests/test_device_loop.py", "tests/test_eagle.py", "tests/test_medusa.py",
              "tests/test_head_drafters.py", "tests/test_batch.py", "tests/test_dflash.py")
DRAFTERS = "retrieval:16:31,eagle:6:31,eagle:4:15,draft:4@0.5,medusa:4"
SAMPLED = "eagle:2,eagle:4,retrieval:16:31"
DFLASH = "retrieval:16:31,eagle:6:31,dflash:15,dflash:15:31"
SHIPPED_DFLASH = "assets/drafters/smollm2-135m-instruct/dflash"
DATASTORE = "assets/drafters/smollm2-135m-instruct/retrieval"  # the default target's own answers, written once

SUITES: dict[str, Suite] = {
    "check": Suite("the CUDA tests (graphs, compile, the attention kernel, the device loop, EAGLE's trees, the "
                   "exact mode and lesson 7's use of it), then the fast path's forward checked against transformers' "
                   "and timed (scripts/gpu_check.py)", (
        Step("pytest", "pytest", ("-q", "-x", "-p", "no:cacheprovider", *CUDA_TESTS, "-k",
                                  "cuda or graph or graphs or compiled or triton or waits or eagle_tree or warm_up")),
        Step("exact-mode", "pytest", ("-q", "-x", "-p", "no:cacheprovider", "tests/test_exact_mode_cuda.py")),
        Step("exact-lesson", "pytest", ("-q", "-x", "-p", "no:cacheprovider", "tests/test_lesson_bugs.py", "-k",
                                        "on_a_gpu")),
        Step("check", "scripts.gpu_check", ("--out", "{out}/check.json")),
    )),
    "identity": Suite("float32, 2 prompts a category (26): every method's greedy output must equal plain "
                      "decoding's (the bench's 'identical' column, 100%)", (
        bench("identity-fp32", "float32", "ngram:16,retrieval:16,retrieval:16:31,eagle:6:31,medusa:4,draft:4",
              "--per-category", "2"),
    )),
    "headline": Suite("bfloat16, all 480 Spec-Bench prompts: the README's speedups, the methods beside plain "
                      "(--methods eagle:6:31,medusa:4 for the model drafters')", (
        bench("headline", "bfloat16", "retrieval:16:31,ngram:8"),
        figures("headline"),
    )),
    "drafters": Suite("bfloat16, all 480 prompts, greedy: every drafter that is a model (EAGLE's tree and chain, the "
                      "distilled draft model with its draft stop, Medusa) beside retrieval, with each step's cost", (
        bench("drafters", "bfloat16", DRAFTERS),
        figures("drafters"),
    )),
    "sampled": Suite("bfloat16, all 480 prompts, temperature 1.0, seed 0: sampled runs in the device loop", (
        bench("sampled", "bfloat16", SAMPLED, "--temperature", "1.0", "--seed", "0"),
        figures("sampled"),
    )),
    "dflash-train": Suite("trains the DFlash block drafter for the default target on its own answers (those of the "
                          "retrieval datastore: nothing generated) for 5 minutes, into OUT/dflash (--resume goes on)", (
        Step("dflash-train", "specviz", ("train-drafter", "--method", "dflash", "--target", "default", "--data",
                                         DATASTORE, "--out", "{out}/dflash", "--minutes", "5", "--draft-vocab",
                                         "16384", "--layers", "2", "--eval-every", "2000", "--device", "cuda")),
    )),
    "dflash-prompted": Suite("the DFlash drafter on answers to prompts: the target answers Magpie prompts for 4 "
                             "minutes (bfloat16, 1,024 at once), then training goes on from the shipped drafter for 4 "
                             "minutes on them, into OUT/dflash", (
        Step("dflash-prompted", "specviz", ("train-drafter", "--method", "dflash", "--target", "default", "--data",
                                            "{out}/dflash/data.pt", "--prompts", "24000", "--gen-batch", "1024",
                                            "--gen-minutes", "4", "--init", SHIPPED_DFLASH, "--out", "{out}/dflash",
                                            "--minutes", "4", "--eval-every", "2000", "--device", "cuda")),
    )),
    "eagle3-data": Suite("the default target writes EAGLE-3's training data (Magpie-style prompts, its own answers, "
                         "long contexts), into OUT/eagle3/data.pt, nothing trained", (
        Step("eagle3-data", "specviz", ("train-drafter", "--method", "eagle3", "--target", "default", "--out",
                                        "{out}/eagle3", "--prompts", "24000", "--gen-batch", "1024", "--gen-minutes",
                                        "3.5", "--data-only", "--device", "cuda"), seconds=540),
    )),
    "eagle3-train": Suite("trains an EAGLE-3 drafter for the default target on OUT/eagle3/data.pt for 7 minutes "
                          "(the training-time test over 7 steps; --resume goes on), into OUT/eagle3", (
        Step("eagle3-train", "specviz", ("train-drafter", "--method", "eagle3", "--target", "default", "--data",
                                         "{out}/eagle3/data.pt", "--out", "{out}/eagle3", "--minutes", "7",
                                         "--draft-vocab", "16384", "--ttt-steps", "7", "--eval-every", "400",
                                         "--device", "cuda"), seconds=580),
    )),
    "eagle3": Suite("bfloat16, all 480 prompts, greedy: the EAGLE-3 drafter of OUT/eagle3 (eagle's chain and tree) "
                    "beside plain, with each step's cost (the shipped EAGLE-1 drafter: the drafters suite)", (
        bench("eagle3", "bfloat16", "eagle:6:31,eagle:6", "--heads", "{out}/eagle3"),
        figures("eagle3"),
    )),
    "dflash": Suite("bfloat16, all 480 prompts, greedy: dflash's chain and tree (DDTree's) beside plain, retrieval "
                    "and EAGLE, with each step's cost", (
        bench("dflash", "bfloat16", DFLASH),
        figures("dflash"),
    )),
    "dflash-sampled": Suite("bfloat16, temperature 1.0, seed 0, one prompt a category (13): dflash beside the "
                            "best sampled drafters", (
        bench("dflash-sampled", "bfloat16", "dflash:15,dflash:7,eagle:4,retrieval:16:31", "--temperature", "1.0",
              "--seed", "0", "--per-category", "1"),
    )),
    "dflash-exactness": Suite("check-exactness of dflash through the device loop, float32: a chain, and a tree "
                              "with top-k", (
        exact("exact-dflash", "--method", "dflash", "--gamma", "4", seconds=270),
        exact("dflash-tree-top-k", "--method", "dflash", "--gamma", "4", "--tree", "15", "--top-k", "20",
              seconds=270),
    )),
    "transformers": Suite("bfloat16: specviz's plain decoding and ngram beside transformers' generate() (plain and "
                          "prompt lookup) on 3 of the prompts, one a category (it runs ~25 tok/s)", (
        bench("transformers", "bfloat16", "ngram:16", "--transformers", "hf-generate,hf-prompt-lookup",
              "--transformers-per-category", "1", "--transformers-limit", "3"),
    )),
    "exactness": Suite("check-exactness of every drafting method on the default model in float32, each in its "
                       "own process", (
        exact("draft", "--method", "draft", "--draft", "default"),
        exact("ngram", "--method", "ngram"),
        exact("ngram-tree", "--method", "ngram", "--tree", "16"),
        exact("retrieval", "--method", "retrieval"),
        exact("retrieval-tree", "--method", "retrieval", "--tree", "16"),
        exact("early-exit", "--method", "early-exit"),
        exact("medusa", "--method", "medusa"),
        exact("medusa-tree", "--method", "medusa", "--tree", "16"),
        exact("medusa-top-p", "--method", "medusa", "--top-p", "0.9"),
        exact("eagle", "--method", "eagle"),
        exact("eagle-tree", "--method", "eagle", "--tree", "15", "--top-k", "20"),
        exact("adaptive", "--method", "adaptive"),
    ), parallel=True),
    "exactness-device": Suite("check-exactness through the device loop, float32, one after another: trees, top-k "
                              "and top-p (docs/exactness.md; the draft model's takes ~8 min)", (
        exact("medusa-top-p", "--method", "medusa", "--gamma", "3", "--top-p", "0.9", seconds=270),
        exact("retrieval-tree", "--method", "retrieval", "--gamma", "8", "--tree", "15", seconds=270),
        exact("ngram-top-k", "--method", "ngram", "--gamma", "4", "--top-k", "50", seconds=270),
        exact("eagle-tree-top-k", "--method", "eagle", "--gamma", "4", "--tree", "15", "--top-k", "20", seconds=270),
        exact("eagle", "--method", "eagle", "--gamma", "4", seconds=270),
        exact("draft-stop", "--method", "draft", "--draft", "distilled", "--gamma", "4", "--draft-stop", "0.5",
              seconds=560),
    )),
    "profile": Suite("each method's lookup and verify graphs under torch.profiler: kernels counted and timed "
                     "(scripts/graph_profile.py)", (
        Step("profile", "scripts.graph_profile", ("--out", "{out}/profile.json"), seconds=400),
    )),
    "exact-cost": Suite("what the exact mode costs plain decoding, on the default model and at the 8B shape "
                        "(scripts/exact_cost.py)", (
        Step("exact-cost", "scripts.exact_cost", ("--target", "default", "--dtype", "bfloat16", "--per-category", "1",
                                                  "--rounds", "3", "--out", "{out}/exact-cost.json")),
        Step("exact-cost-8b", "scripts.exact_cost", ("--target", "random:llama-8b", "--dtype", "bfloat16",
                                                     "--limit", "4", "--out", "{out}/exact-cost-8b.json")),
    )),
    "zero-gpu": Suite("ZeroGPU's speed emulated beside a dedicated GPU's, compiled and with graphs only "
                      "(scripts/zero_gpu_bench.py)", (
        Step("zero-gpu", "scripts.zero_gpu_bench", ("--out", "{out}/zero_gpu.json")),
        Step("zero-gpu-eager-layers", "scripts.zero_gpu_bench", ("--out", "{out}/zero_gpu_eager_layers.json"),
             env=(("SPECVIZ_COMPILE", "0"),)),
    )),
    "published-drafters": Suite("EAGLE-1 and Medusa-1 files in their published layouts at the 7B shape, and EAGLE-3's "
                                "at Llama 3.1 8B's (random weights): loaded, and what drafting costs, a step and a "
                                "depth, beside the verify pass (scripts/gpu_published_drafters.py)", (
        Step("published-drafters", "scripts.gpu_published_drafters", ("--out", "{out}")),
        Step("published-eagle3-8b", "scripts.gpu_published_drafters", ("--shape", "llama-8b", "--methods", "eagle3",
                                                                      "--gamma", "6", "--out", "{out}/eagle3-8b")),
    )),
    "app": Suite("the web app served against the library on one prompt: its tok/s over the library's, ngram and "
                 "retrieval (scripts/gpu_app_check.py; needs the app's wheels installed, docs/gpu.md)", (
        Step("app-ngram", "scripts.gpu_app_check", ("--out", "{out}/app-ngram", "--method", "ngram", "--gamma", "8",
                                                    "--repeats", "5")),
        Step("app-retrieval", "scripts.gpu_app_check", ("--out", "{out}/app-retrieval", "--method", "retrieval",
                                                        "--gamma", "16", "--repeats", "5")),
    )),
}

OVERRIDES = ("methods", "per_category", "prompts", "max_new_tokens", "device")


def with_option(args: tuple[str, ...], flag: str, value: str | None) -> tuple[str, ...]:
    """args with flag set to value (replaced where it is there, else added before --out); None removes it."""
    out, i = [], 0
    while i < len(args):
        if args[i] == flag:
            i += 2
            continue
        out.append(args[i])
        i += 1
    if value is not None:
        at = out.index("--out") if "--out" in out else len(out)
        out[at:at] = [flag, value]
    return tuple(out)


def adjusted(step: Step, options: argparse.Namespace, prompts: str) -> Step:
    """A bench step with the command line's overrides applied (other steps as they are)."""
    if step.tool != "specviz" or step.args[0] != "bench":
        return step
    args = with_option(step.args, "--prompts", prompts)
    if options.methods:
        args = with_option(args, "--methods", options.methods)
    if options.per_category is not None:
        args = with_option(args, "--per-category", str(options.per_category) if options.per_category else None)
    if options.max_new_tokens:
        args = with_option(args, "--max-new-tokens", str(options.max_new_tokens))
    if options.device:
        args = with_option(args, "--device", options.device)
    methods = args[args.index("--methods") + 1]
    if "--draft" not in args and any(m.strip().startswith("draft") for m in methods.split(",")):
        args = with_option(args, "--draft", "distilled")  # only `draft` loads a draft model
    return dataclasses.replace(step, args=args)


def command(step: Step, out: str, part: str) -> list[str]:
    """The step's command line, ready to run from the repository's root."""
    return [sys.executable, "-m", step.tool, *(a.format(out=out, part=part) for a in step.args)]


class _Parsed(Exception):
    def __init__(self, namespace):
        self.namespace = namespace


@contextlib.contextmanager
def _parse_only():
    """argparse stops right after parsing (a bad argument exits 2 as usual), so a tool's main() checks its
    arguments without doing anything."""
    real = argparse.ArgumentParser.parse_args

    def parse(self, args=None, namespace=None):
        raise _Parsed(real(self, args, namespace))

    argparse.ArgumentParser.parse_args = parse
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_args = real


def problems(step: Step) -> list[str]:
    """What is wrong with a step's command, by its tool's own checks; [] when it would start. Nothing runs:
    specviz's checks of its arguments come before it imports torch, a tool's main() stops after parsing."""
    args = [a.format(out="OUT", part="") for a in step.args]
    where = f"{step.name} ({step.tool} {shlex.join(args)})"
    if step.tool == "specviz":
        from specviz.cli import build_parser, settings_from
        from specviz.errors import SpecvizError
        from specviz.methods import parse_method
        try:
            parsed = build_parser().parse_args(args)
            settings = settings_from(parsed) if hasattr(parsed, "max_new_tokens") else None  # train-drafter has none
            if parsed.command == "bench":
                for spec in parsed.methods.split(","):
                    parse_method(spec.strip(), settings)
        except SpecvizError as error:
            return [f"{where}: {error}"]
        return []
    if step.tool == "pytest":
        files = [a for a in args if a.endswith(".py")]
        return [f"{where}: no {f}" for f in files if not (ROOT / f).is_file()] + (
            [] if files else [f"{where}: names no test file"])
    if not re.fullmatch(r"scripts\.\w+", step.tool) or not (ROOT / (step.tool.replace(".", "/") + ".py")).is_file():
        return [f"{where}: no such tool (specviz, pytest or scripts.NAME)"]
    module = importlib.import_module(step.tool)
    said, code = io.StringIO(), None
    with _parse_only(), contextlib.redirect_stderr(said):
        try:
            module.main(args)
        except _Parsed:
            return []
        except SystemExit as exit_code:
            code = exit_code.code
    lines = said.getvalue().strip().splitlines()
    return [f"{where}: {lines[-1] if lines else f'exit {code}' if code is not None else 'it ran without parsing'}"]


def prompt_part(prompts: str, part: str, out: str, write: bool) -> tuple[str, str]:
    """(the prompt file to use, the suffix for results) for --part K/N: the Kth of N consecutive slices of the
    prompt file, written to OUT/prompts-K-of-N.jsonl."""
    if not part:
        return prompts, ""
    k, n = (int(x) for x in part.split("/"))
    path = f"{out}/prompts-{k}-of-{n}.jsonl"
    if write:
        lines = Path(prompts).read_text().splitlines(keepends=True)
        size = -(-len(lines) // n)
        Path(path).write_text("".join(lines[(k - 1) * size:k * size]))
    return path, f"-{k}of{n}"


def environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    if not env.get("SPECVIZ_DEFAULT_GGUF") and Path(STAGED).is_file():
        env["SPECVIZ_DEFAULT_GGUF"] = STAGED
    return env


def record_machine(out: str, env: dict[str, str]) -> None:
    """OUT/gpu.txt: the card (or "no GPU") and torch's and transformers' versions, printed too."""
    card = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True) if shutil.which("nvidia-smi") else None
    versions = subprocess.run([sys.executable, "-c", "import torch, transformers; print('torch', torch.__version__, "
                               "'transformers', transformers.__version__)"], capture_output=True, text=True, env=env)
    text = (card.stdout.strip() if card and card.returncode == 0 else "no GPU") + "\n" + versions.stdout
    Path(out, "gpu.txt").write_text(text)
    print(text, end="", flush=True)


def start(step: Step, cmd: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, threading.Timer]:
    """The step's process (its own process group) and the timer that stops the group when its time is up."""
    process = subprocess.Popen(cmd, cwd=ROOT, env=dict(env, **dict(step.env)), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timer = threading.Timer(step.seconds or 0, lambda: os.killpg(process.pid, signal.SIGKILL))
    if step.seconds:
        timer.start()
    return process, timer


def finish(step: Step, process: subprocess.Popen, timer: threading.Timer, log: Path, quiet: bool) -> int:
    """Copies the step's output to its log (and, less the progress bars, here) until it ends; 124 where
    its time ran out."""
    with open(log, "w") as file:
        for chunk in process.stdout:
            file.write(chunk)
            for line in chunk.replace("\r", "\n").splitlines():
                if not quiet and not NOISE.search(line):
                    print(f"{step.name}: {line}", flush=True)
    code = process.wait()
    stopped = step.seconds and not timer.is_alive()
    timer.cancel()
    return 124 if stopped and code < 0 else code


def log_of(step: Step, out: str, part: str) -> Path:
    return Path(out, f"{step.name}{part}.log")


def run_steps(suite: Suite, steps: list[Step], out: str, part: str, env: dict[str, str]) -> dict[str, int]:
    codes = {}
    if suite.parallel:
        running = [(s, *start(s, command(s, out, part), env)) for s in steps]
        for step, process, timer in running:
            codes[step.name] = finish(step, process, timer, log_of(step, out, part), quiet=True)
            print(f"{step.name}: " + "".join(log_of(step, out, part).read_text().splitlines(True)[-6:]),
                  end="", flush=True)
        return codes
    for step in steps:
        began = time.monotonic()
        codes[step.name] = finish(step, *start(step, command(step, out, part), env), log_of(step, out, part),
                                  quiet=False)
        print(f"== {step.name}: exit {codes[step.name]} after {time.monotonic() - began:.0f} s", flush=True)
    return codes


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suite", nargs="?", help="one of: " + ", ".join(SUITES))
    parser.add_argument("--list", action="store_true", help="list the suites and their steps")
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"), help="results folder (default $OUT "
                        "or /tmp/out)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands; run and write nothing")
    parser.add_argument("--only", default="", help="comma-separated step names: run just those")
    parser.add_argument("--methods", help="the bench commands' methods, e.g. eagle:6:31,medusa:4")
    parser.add_argument("--per-category", type=int, help="the first N prompts of each category (0: every prompt)")
    parser.add_argument("--prompts", default=PROMPTS, help="the prompt file (default %(default)s)")
    parser.add_argument("--part", default="", help="K/N: the Kth of N slices of the prompt file")
    parser.add_argument("--max-new-tokens", type=int, help="the bench commands' tokens a prompt (default 256)")
    parser.add_argument("--device", help="the bench commands' device (cpu: checks a suite anywhere)")
    args = parser.parse_args(argv)
    if not args.list and args.suite not in SUITES:
        parser.error(f"SUITE must be one of {', '.join(SUITES)} (or --list), not {args.suite!r}")
    if args.part and not re.fullmatch(r"[1-9]\d*/[1-9]\d*", args.part) or (
            args.part and int(args.part.split("/")[0]) > int(args.part.split("/")[1])):
        parser.error(f"--part must be K/N with 1 <= K <= N (e.g. 2/3), not {args.part!r}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.list:
        for name, suite in SUITES.items():
            print(f"{name}: {suite.about}\n    steps: {', '.join(s.name for s in suite.steps)}")
        return 0
    suite = SUITES[args.suite]
    only = [s for s in args.only.split(",") if s]
    unknown = sorted(set(only) - {s.name for s in suite.steps})
    if unknown:
        print(f"gpu_suite: no step {', '.join(unknown)} in {args.suite}: its steps are "
              f"{', '.join(s.name for s in suite.steps)}", file=sys.stderr)
        return 2
    prompts, part = prompt_part(args.prompts, args.part, args.out, write=False)
    steps = [adjusted(s, args, prompts) for s in suite.steps if not only or s.name in only]
    wrong = [p for s in steps for p in problems(s)]
    if wrong:
        print("gpu_suite: refused, nothing ran:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 2
    if args.dry_run:
        for step in steps:
            env = "".join(f"{k}={v} " for k, v in step.env)
            limit = f"timeout {step.seconds} " if step.seconds else ""
            print(f"{limit}{env}{shlex.join(command(step, args.out, part))}  > {log_of(step, args.out, part)}"
                  + (" &" if suite.parallel else ""))
        return 0
    os.makedirs(args.out, exist_ok=True)
    prompt_part(args.prompts, args.part, args.out, write=True)
    env = environment()
    record_machine(args.out, env)
    codes = run_steps(suite, steps, args.out, part, env)
    print("summary: " + ", ".join(f"{name} exit {code}" for name, code in codes.items()), flush=True)
    return max(codes.values(), default=0) and 1


if __name__ == "__main__":
    raise SystemExit(main())
