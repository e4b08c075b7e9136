"""Command line: `python -m specviz generate | bench | check-exactness | learn | train-drafter ...`.

Bad input ends with exit code 2 and one line on stderr, never a traceback."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from .errors import SpecvizError
from . import methods as registry
from .methods import check_batchable, exactness_prompt, parse_batch_sizes, parse_method
from .options import set_for_this_process
from .records.schema import TokenKind
from .settings import MAX_TREE, DecodeSettings

EXIT_BAD_INPUT = 2
# check-exactness: the method passed but its control was not caught, so the test could not have seen a bias of
# the control's size either: inconclusive, never a pass
EXIT_INCONCLUSIVE = 3


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: same contract as ours ("specviz: error: ..." once)
        command = self.prog.removeprefix("specviz").strip()
        raise SpecvizError(f"{command}: {message}" if command else message)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("not a number: nan")
    return value


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("models and decoding")
    group.add_argument("--target", default="default",
                       help="'default' (offline SmolLM2-135M-Instruct), a Hub id, a folder, a .gguf file, or "
                       "random:SHAPE (random weights of a stated shape, for forward costs: random:llama-8b)")
    group.add_argument("--draft", default=None, help="draft model for the draft method (same forms as --target)")
    group.add_argument("--exit-layer", type=int, default=None,
                       help="layers the early-exit drafter keeps (default: a quarter)")
    group.add_argument("--heads", default=None, help="trained drafter for medusa/eagle, datastore for retrieval: a "
                       "folder or Hub id (FasterDecoding Medusa heads, SafeAILab EAGLE-1, datastore.npz + "
                       "config.json); "
                       "default: the one shipped for the default target")
    group.add_argument("--adaptive-lookup", default="auto", choices=("auto", "ngram", "retrieval"),
                       help="adaptive: what it looks up beside a model drafter (retrieval: also the datastore; "
                            "auto: retrieval on a CPU where a datastore ships for the target, else ngram)")
    group.add_argument("--gamma", type=int, default=4, help="draft tokens per step, 1..32 (adaptive: the maximum)")
    group.add_argument("--tree", type=int, default=0, help="0 = draft a chain; N = a draft tree of up to N tokens, "
                       f"depth gamma, verified in one pass ({registry.tree_drafting()}; 1..{MAX_TREE})")
    group.add_argument("--draft-stop", type=_number, default=0.0,
                       help="draft and early-exit: end a draft after a token the drafter gives less than this "
                            "probability (e.g. 0.5; 0 = always gamma tokens)")
    group.add_argument("--exact", choices=("on", "off"), default=None,
                       help="the target's forward in the exact mode on a GPU: each position computed as plain "
                            "decoding computes it, so greedy output equals plain bit for bit in bfloat16 "
                            "(docs/exactness.md; default: on, or SPECVIZ_EXACT)")
    group.add_argument("--max-new-tokens", type=int, default=128, help="tokens to generate at most (default "
                       "%(default)s; check-exactness generates its --depth and a few more)")
    group.add_argument("--temperature", type=_number, default=0.0, help="sampling temperature: 0 = greedy, the same "
                       "output as plain decoding token for token; above 0 samples, with the target's exact "
                       "distribution (default %(default)s)")
    group.add_argument("--top-k", type=int, default=0, help="sample from the K likeliest tokens only (0 = off)")
    group.add_argument("--top-p", type=_number, default=1.0, help="sample from the likeliest tokens whose "
                       "probabilities add up to P (nucleus sampling; 1 = off)")
    group.add_argument("--seed", type=int, default=None, help="seed of the sampling, for a run that can be repeated "
                       "(default: none; check-exactness: run i uses SEED + i, from 0, the control the seeds after)")
    group.add_argument("--device", default="auto", help="auto, cpu or cuda")
    group.add_argument("--dtype", default="auto",
                       help="auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16")
    group.add_argument("--raw-prompt", action="store_true", help="send the prompt as is, without the chat template")
    shard = parser.add_argument_group("several GPUs")
    shard.add_argument("--device-map", default=None,
                       help="shard the target over this machine's GPUs with accelerate: auto, balanced, sequential, or "
                            "a JSON map")
    shard.add_argument("--max-memory", default=None, help="per-device cap for the device map, e.g. 0=20GiB,1=70GiB")
    shard.add_argument("--draft-device", default=None, help="device of the draft model (default: the target's first)")


def settings_from(args) -> DecodeSettings:
    return DecodeSettings(
        max_new_tokens=args.max_new_tokens, gamma=args.gamma, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, tree=args.tree, draft_stop=args.draft_stop,
    ).validate()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specviz", description="Speculative decoding, step by step.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    gen = commands.add_parser("generate", help="run one prompt and show every step")
    gen.add_argument("--prompt", required=True, help="the text to continue; sent through the target's chat template "
                     "as a user turn unless --raw-prompt")
    gen.add_argument("--method", default="ngram", choices=registry.names(),
                     help="the drafter (plain: none, the baseline; "
                     "default %(default)s)")
    add_model_options(gen)
    gen.add_argument("--compare-plain", action="store_true", help="also run plain decoding and report the speedup")
    gen.add_argument("--steps", action="store_true", help="also print a line a step: what the drafter proposed, what "
                     "the target kept, the token it wrote itself")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of the coloured view")

    bench = commands.add_parser("bench", help="run a prompt file through plain decoding and several methods")
    bench.add_argument("--prompts", required=True, help="JSONL: 'turns' (Spec-Bench) or 'prompt' per line")
    bench.add_argument("--limit", type=int, default=None, help="use the first N prompts")
    bench.add_argument("--per-category", type=int, default=None, help="use the first N prompts of each category")
    bench.add_argument("--methods", default="ngram", help="comma-separated, e.g. ngram,early-exit,adaptive; "
                       "METHOD:GAMMA[:TREE][@STOP] sets gamma (the tree, the draft stop) for one entry, e.g. "
                       "ngram:8,ngram:8:64,draft:4@0.5")
    add_model_options(bench)
    bench.add_argument("--transformers", default="", help="also transformers' generate() on the same prompts, "
                       "model and device: comma-separated hf-generate,hf-prompt-lookup,hf-assisted (needs --draft)")
    bench.add_argument("--transformers-per-category", type=int, default=1,
                       help="transformers runs on the first N prompts of each category (0 = all); it is slow")
    bench.add_argument("--transformers-limit", type=int, default=None,
                       help="at most N prompts for transformers, spread over the categories")
    bench.add_argument("--batch-sizes", default="", help="decode batches of these sizes, e.g. 1,2,4,8,16: per method "
                       "and batch size, tokens/s, latency a token, tau and the speedup over plain decoding of the "
                       f"same batches ({registry.joined(registry.names(batchable=True))} batch)")
    bench.add_argument(
        "--compare-single",
        action="store_true",
        help="with --batch-sizes: batch 1 through both the "
        "single-sequence loop (what batch 1 uses) and the batched runner, side by side (rows carry path)",
    )
    bench.add_argument("--out", required=True, help="where to write the results JSON")
    bench.add_argument("--energy", action="store_true", help="also joules per generated token on the GPU (NVML's "
                       "energy counter through nvidia-ml-py, else nvidia-smi's power draw; on a CPU: not measured)")

    check = commands.add_parser("check-exactness",
                                help="test that a method's sampled output is the target's distribution",
                                description="Tests that a method's sampled output is the target's distribution. "
                                "--dtype auto means float32 here, on a GPU too: in bfloat16 the test also measures "
                                "rounding. Exits 0 when the method passed and its control was caught, 1 when the "
                                "method's output is not the target's, 3 when the control was not caught (inconclusive: "
                                "raise --samples), 2 on bad input.")
    check.add_argument("--method", default="ngram", choices=registry.names(drafts=True),
                       help="the method whose sampled output is tested (default %(default)s)")
    check.add_argument("--prompt", default=None, help="default: one on which the method's drafts are both accepted "
                       "and rejected (a repeated pattern, sent as is, for the lookups; a chat question for the model "
                       "drafters)")
    check.add_argument("--samples", type=int, default=3000,
                       help="engine runs for the method (and as many for the control)")
    check.add_argument("--depth", type=int, default=2, help="new tokens whose joint distribution is tested (1..4)")
    check.add_argument("--control", type=_number, default=0.9, help="the control runs the method at this fraction of "
                       "the temperature, a small bias the test must catch; 0 = no control")
    check.add_argument("--alpha", type=_number, default=0.001, help="significance level of the test")
    add_model_options(check)
    check.set_defaults(temperature=1.0)  # and --dtype auto means float32 here (exactness_dtype)

    learn = commands.add_parser("learn", help="run the Learn tab's lessons here: each claim, its measured figures "
                                "and the sentence they support")
    learn.add_argument("lesson", nargs="?", default="all",
                       help="a lesson's number (1-7, and any registered after) or all (default)")
    learn.add_argument("--target", default="default", help="the model the lessons measure (as generate's --target)")
    learn.add_argument("--device", default="auto", help="auto, cpu or cuda")
    learn.add_argument("--dtype", default="auto",
                       help="auto (bfloat16 on GPU, float32 on CPU), float32, bfloat16, float16")
    learn.add_argument("--json", default=None, metavar="FILE", help="also write every lesson's results to FILE, in "
                       "one file the Learn tab's \"Open a saved run\" draws")
    learn.add_argument("--out", default=None, metavar="DIR", help="also write each lesson to DIR/lesson-N-KEY.json, "
                       "complete with where and when it was measured: the Learn tab's \"Open a saved run\" draws it")

    from .train import add_arguments as add_train_arguments

    train = commands.add_parser("train-drafter",
                                help="train Medusa heads or an EAGLE drafter for a target (GPU), or write a retrieval "
                                     "datastore")
    add_train_arguments(train)
    return parser


_STYLE = {  # ANSI: colour and a non-colour cue for each kind
    TokenKind.ACCEPTED: "\033[34;4m",  # blue, underlined
    TokenKind.REJECTED: "\033[31;9m",  # red, struck through
    TokenKind.RESAMPLED: "\033[33;1m",  # yellow, bold
    TokenKind.BONUS: "\033[32;1;4m",  # green, bold underlined
    TokenKind.TARGET: "",
}


def render_terminal(tokens, colour: bool) -> str:
    parts = []
    for token in tokens:
        style = _STYLE[token.kind] if colour else ""
        text = token.text if token.kind != TokenKind.REJECTED or colour else f"[-{token.text}-]"
        parts.append(f"{style}{text}\033[0m" if style else text)
    return "".join(parts)


def step_line(step) -> str:
    """One step in a line: the drafted tokens, how many the target kept, the token it wrote itself and why."""
    drafted = " ".join(repr(p.text) for p in step.positions) or "nothing"
    if step.gamma == 0:
        return f"step {step.index}: no draft; the target wrote {step.next_token.text!r}"
    kept = f"kept {step.n_accepted} of {step.gamma}"
    if step.emitted <= step.n_accepted:
        return f"step {step.index}: drafted {drafted}; {kept}, and the output ends there"
    how = "the bonus, all drafts kept" if step.n_accepted == step.gamma else f"{step.next_token.kind.value}"
    return f"step {step.index}: drafted {drafted}; {kept}; the target wrote {step.next_token.text!r} ({how})"


def cmd_generate(args) -> int:
    settings = settings_from(args)  # a bad setting is refused before torch is imported
    from .api import generate

    report = generate(
        args.prompt, method=args.method, target=args.target, draft=args.draft, settings=settings,
        device=args.device, dtype=args.dtype, chat=not args.raw_prompt, exit_layer=args.exit_layer,
        compare_plain=args.compare_plain, device_map=args.device_map, max_memory=args.max_memory,
        draft_device=args.draft_device, heads=args.heads, adaptive_lookup=args.adaptive_lookup,
    )
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False))
        return 0
    result, metrics = report.result, report.result.metrics
    colour = sys.stdout.isatty()
    if args.steps:
        print("\n".join(step_line(step) for step in result.steps) + "\n")
    print(render_terminal(result.tokens, colour))
    legend = "accepted=blue underlined, rejected=red struck, resampled=yellow bold, bonus=green bold underlined"
    print(f"\n[{legend}]" if colour else "\n[rejected drafts shown as [-text-]]")
    alpha = "n/a" if metrics.acceptance_rate is None else f"{metrics.acceptance_rate:.2f}"
    line = (f"{result.method}: {metrics.new_tokens} tokens in {metrics.wall_seconds:.2f}s "
            f"({metrics.tokens_per_second:.1f} tok/s), tau={metrics.mean_accepted_length:.2f}, alpha={alpha}, "
            f"drafted={metrics.drafted}, accepted={metrics.accepted}")
    if report.plain is not None:
        line += f"; plain {report.plain.metrics.tokens_per_second:.1f} tok/s, speedup {report.speedup:.2f}x"
        if report.identical_to_plain is not None:
            line += f", identical to plain: {report.identical_to_plain}"
    print(line)
    return 0


def cmd_bench(args) -> int:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    settings = settings_from(args)
    for spec in methods:  # refused before torch is imported
        parse_method(spec, settings)
    if args.batch_sizes:
        parse_batch_sizes(args.batch_sizes)
        return bench_batches(args, methods)
    from .measure.bench import run_bench

    run_bench(
        prompts_file=args.prompts, methods=methods, settings=settings, out=args.out,
        target=args.target, draft=args.draft, device=args.device, dtype=args.dtype, chat=not args.raw_prompt,
        exit_layer=args.exit_layer, limit=args.limit, per_category=args.per_category,
        device_map=args.device_map, max_memory=args.max_memory, draft_device=args.draft_device,
        transformers=[m.strip() for m in args.transformers.split(",") if m.strip()],
        transformers_per_category=args.transformers_per_category or None,
        transformers_limit=args.transformers_limit, heads=args.heads, adaptive_lookup=args.adaptive_lookup,
        energy=args.energy,
    )
    return 0


def bench_batches(args, methods: list[str]) -> int:
    if args.transformers or args.heads or args.device_map:
        raise SpecvizError(f"--batch-sizes runs {registry.joined(registry.names(batchable=True))} on one device: drop "
                           "--transformers, --heads and --device-map")
    for spec in methods:
        check_batchable(parse_method(spec, settings_from(args))[0])  # refused before torch is imported
    from tqdm import tqdm

    from .measure.batch_bench import run_batch_bench

    sizes = parse_batch_sizes(args.batch_sizes)
    with tqdm(desc="batches", unit="run", file=sys.stderr) as bar:
        def progress(done: int, total: int, what: str) -> None:
            bar.total = total
            bar.set_postfix_str(what)
            bar.update(done - bar.n)

        run_batch_bench(args.prompts, methods, sizes, settings_from(args), args.out, target=args.target,
                        device=args.device, dtype=args.dtype, chat=not args.raw_prompt, limit=args.limit,
                        per_category=args.per_category, progress=progress, draft=args.draft,
                        exit_layer=args.exit_layer, compare_single=args.compare_single)
    return 0


def exactness_dtype(requested: str) -> str:
    """check-exactness's dtype: float32 unless one is asked for. The exact distribution comes from plain
    transformers forwards and the runs from the engine's; in bfloat16 the two round differently, and a peaked
    distribution shows it (Medusa's: in bfloat16 it fails on the host loop and the device loop alike, in float32
    it passes)."""
    return "float32" if requested == "auto" else requested


ROUNDING_NOTE = ("  note: in {dtype} the engine's forwards and the forwards that enumerate the target's distribution "
                 "round differently, so this test also measures rounding; --dtype float32 tests the method alone")


def cmd_check_exactness(args) -> int:
    if args.samples < 100:
        raise SpecvizError("--samples must be at least 100 for the test to mean anything")
    if not 1 <= args.depth <= 4:
        raise SpecvizError("--depth must be between 1 and 4")
    if not 0 <= args.control < 1:
        raise SpecvizError("--control must be in [0, 1): the fraction of the temperature the control runs at")
    settings = settings_from(args)
    if settings.greedy:
        raise SpecvizError("check-exactness tests sampling: give a --temperature above 0")
    # the arguments are sound: only now the imports that take seconds (torch, transformers)
    from tqdm import tqdm

    from .api import encode, make_proposer, resolve_models
    from .measure.exactness_check import check_exactness, coverage_warning

    target, draft = resolve_models(args.target, args.draft, args.device, exactness_dtype(args.dtype),
                                   draft_device=args.draft_device)
    prompt, raw = (args.prompt, args.raw_prompt) if args.prompt is not None else exactness_prompt(args.method)
    exit_layer = args.exit_layer
    if args.method == "early-exit" and exit_layer is None:
        exit_layer = target.model.config.num_hidden_layers * 7 // 8
    prompt_ids = encode(target, prompt, chat=not raw)
    make = lambda: make_proposer(args.method, target, draft, exit_layer, heads=args.heads,  # noqa: E731
                                 adaptive_lookup=args.adaptive_lookup)
    make()  # a bad drafter or option fails here, before any sampling
    bars = {}

    def progress(stage: str, done: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=args.samples, desc=f"{args.method if stage == 'method' else 'control'} runs",
                               file=sys.stderr, leave=False)
        bars[stage].update(done - bars[stage].n)

    report = check_exactness(target, make, prompt_ids, settings, args.samples, args.depth,
                             control_factor=args.control or None, progress=progress)
    for bar in bars.values():
        bar.close()
    fit = report.fit
    print(f"prompt{' (as is)' if raw else ''}: {prompt!r}" + (f", exit layer {exit_layer}" if exit_layer else ""))
    print(f"{report.method}: {report.samples} samples of the first {report.depth} tokens, temperature "
          f"{settings.temperature:g}, top-k {settings.top_k}, top-p {settings.top_p:g}, gamma {settings.gamma}, "
          f"tree {settings.tree}, on {target.device} {str(target.dtype).replace('torch.', '')}")
    alpha = "n/a" if not report.drafted else f"{report.accepted / report.drafted:.2f}"
    loops = ", ".join(f"{count} on the {loop} loop" for loop, count in sorted(report.loops.items()))
    print(f"  drafted {report.drafted}, accepted {report.accepted} (alpha {alpha}); runs: {loops}")
    warning = coverage_warning(report.drafted, report.accepted)
    if warning:
        print(f"  warning: {warning}")
    dtype = str(target.dtype).replace("torch.", "")
    if dtype != "float32":
        print(ROUNDING_NOTE.format(dtype=dtype))
    print(f"  method:  chi-square {fit.statistic:.1f}, dof {fit.dof}, p = {fit.p_value:.3g}  "
          f"{'exact (no difference found)' if report.passed(args.alpha) else 'NOT the target distribution'}")
    if report.control is not None:
        control = report.control
        caught = report.control_caught(args.alpha)
        print(f"  control (temperature x {args.control:g}): chi-square {control.statistic:.1f}, dof {control.dof}, "
              f"p = {control.p_value:.3g}  {'caught, as it must be' if caught else 'NOT caught: raise --samples'}")
    return exactness_exit_code(report.passed(args.alpha), report.control_caught(args.alpha))


def exactness_exit_code(passed: bool, control_caught: bool | None) -> int:
    """1 when the method failed; 3 when it passed but the control (None: no control asked) went uncaught, since
    a test that cannot see the control's bias has not shown that the method has none; else 0."""
    if not passed:
        return 1
    return EXIT_INCONCLUSIVE if control_caught is False else 0


def text_table(headers: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell; a column of numbers (its header too) to the right."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [bool(rows) and all(isinstance(row[i], (int, float)) for row in rows) for i in range(len(headers))]
    line = lambda row: "  ".join(cell.rjust(w) if right else cell.ljust(w)  # noqa: E731
                                 for cell, w, right in zip(row, widths, numeric)).rstrip()
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(row) for row in cells[1:]])


def plain_sentence(markdown: str) -> str:
    """A lesson's sentence without its markdown emphasis."""
    return markdown.replace("**", "")


def writable(path: str, folder: bool = False) -> None:
    """A place for results, checked before a lesson runs (minutes of measuring, then no file, helps nobody):
    --out's folder is made; --json's file must be in an existing folder. SpecvizError saying what to do."""
    from pathlib import Path

    target = Path(path)
    try:
        if folder:
            target.mkdir(parents=True, exist_ok=True)
            probe = target / ".specviz-write-check"
            probe.touch()
            probe.unlink()
        else:
            if not target.parent.is_dir():
                raise SpecvizError(f"cannot write {path}: there is no folder {target.parent} (make it first, or give "
                                   "a file in a folder that exists)")
            if target.is_dir() or not os.access(target if target.exists() else target.parent, os.W_OK):
                raise SpecvizError(f"cannot write {path}: "
                                   f"{'it is a folder' if target.is_dir() else 'permission denied'}")
    except OSError as error:
        raise SpecvizError(f"cannot write {'to ' if folder else ''}{path}: {error.strerror or error}") from None


def cmd_learn(args) -> int:
    from .lessons import lessons_to_run
    from .lessons.saved import lesson_json, lessons_json, measured_on, save_lesson
    from .lessons.catalogue import plain, prompt_line
    from .models.loading import load_model

    chosen = lessons_to_run(args.lesson)  # a wrong number fails here, before the model loads
    if args.json:
        writable(args.json)
    if args.out:
        writable(args.out, folder=True)
    print(f"loading {args.target}…", file=sys.stderr)
    target = load_model(args.target, args.device, args.dtype)
    where = measured_on(target, args.target)
    results = []
    for lesson in chosen:
        print(f"lesson {lesson.number} · {lesson.title}: measuring on {target.device}…", file=sys.stderr)
        record, started = None, time.monotonic()
        for updates, record in enumerate(lesson.run(target), start=1):
            print(f"\r  {updates} measurements", end="", file=sys.stderr, flush=True)
        seconds = time.monotonic() - started
        print(f"  {seconds:.1f} s", file=sys.stderr)
        if args.out:
            print(f"  wrote {save_lesson(args.out, lesson, record, where, round(seconds, 1))}", file=sys.stderr)
        headers, rows, sentence = lesson.headers(record), lesson.rows(record), plain_sentence(lesson.sentence(record))
        print(f"\n{lesson.number} · {lesson.title}\nClaim: {plain_sentence(lesson.claim)}\n{prompt_line(lesson)}\n")
        if rows:
            print(text_table(headers, rows) + "\n")
        print(f"Measured: {sentence}", flush=True)
        if lesson.sources:
            print("\nThe papers' own figures, on other models and machines:\n" + "\n".join(f"  {line}"
                                                                                           for line in lesson.sources))
        # what --out writes for the lesson (so that the Learn tab opens the file), its record's figures added
        entry = lesson_json(lesson, record, where, round(seconds, 1))
        figures = plain(record)
        if isinstance(figures, dict) and isinstance(entry["record"], dict):
            entry["record"] = figures | entry["record"]
        results.append(entry | {"sentence": sentence})
    if args.json:
        with open(args.json, "w") as out:
            json.dump(lessons_json(results, args.target, str(target.device)), out, ensure_ascii=False, indent=1)
        print(f"wrote {args.json}: the Learn tab's \"Open a saved run\" draws it", file=sys.stderr)
    return 0


def cmd_train(args) -> int:
    from .train import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if getattr(args, "exact", None):
            set_for_this_process(exact=args.exact == "on")
        commands = {"generate": cmd_generate, "bench": cmd_bench, "check-exactness": cmd_check_exactness,
                    "learn": cmd_learn, "train-drafter": cmd_train}
        return commands[args.command](args)
    except SpecvizError as error:
        print(f"specviz: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("specviz: interrupted", file=sys.stderr)
        return 130
