"""Where a speculative step's host time goes, without a profiler's distortion: the engine's functions wrapped
in perf_counter timers (a wrapper costs ~0.1 us), mean microseconds a step for each, over Spec-Bench prompts
(one per category), greedy, 256 new tokens. Nested timers overlap (forward holds _replay); waits for the GPU
land where the host first reads a result (_clock's synchronize, verify's argmax). From the repository's root,
on the GPU machine or here (COLLECTOR=on: leave the garbage collector running during runs, as before the engine
paused it):
    METHODS=plain:1:0,retrieval:16:0,retrieval:16:63 python3 -m scripts.host_timing [cuda|cpu]"""
import collections, functools, gc, os, sys, time

import torch

from specviz import DecodeSettings
from specviz import engine, fast, tree, verify
from specviz.api import encode, make_proposer, run_once, warm_up
from specviz.bench import load_prompts
from specviz.datastore import Datastore
from specviz.models import load_model
from specviz.proposers import ngram, retrieval

totals: dict = collections.defaultdict(float)
calls: dict = collections.Counter()


def timed(owner, name: str, label: str | None = None) -> None:
    original = getattr(owner, name)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start
            calls[label] += 1
    setattr(owner, name, wrapper)


for owner, names in [(engine, ["_clock"]), (engine.SpeculativeRun, ["_verify_tree", "_lean_record"]),
                     (verify, ["verify_greedy"]), (fast.StaticRunner, ["forward", "keep_nodes", "_replay"]),
                     (fast, ["visibility", "check_tree", "tree_depths"]),
                     (tree, ["walk_greedy", "first_child_chain", "is_chain"]),
                     (Datastore, ["continuations"]), (retrieval, ["weighted_trie", "heaviest_line"]),
                     (ngram, ["weighted_trie"]), (retrieval.RetrievalProposer, ["propose", "observe"]),
                     (ngram.NgramProposer, ["propose", "observe"])]:
    for name in names:
        if hasattr(owner, name):
            timed(owner, name)

gc_started = [0.0]


def gc_timer(phase, info):  # the garbage collector's own time, which lands inside whatever allocated last
    if phase == "start":
        gc_started[0] = time.perf_counter()
    else:
        totals[f"gc generation {info['generation']}"] += time.perf_counter() - gc_started[0]
        calls[f"gc generation {info['generation']}"] += 1


gc.callbacks.append(gc_timer)
if os.environ.get("COLLECTOR") == "on":
    import contextlib
    engine.collector_paused = contextlib.nullcontext
device = sys.argv[1] if len(sys.argv) > 1 else ("cuda" if torch.cuda.is_available() else "cpu")
dtype = torch.bfloat16 if device == "cuda" else torch.float32
target = load_model("default", device=device, dtype=dtype)
prompts = load_prompts(os.environ.get("PROMPTS", "data/spec_bench/question.jsonl"), per_category=1)[:int(os.environ.get("COUNT", 6))]
encoded = [encode(target, p["prompt"]) for p in prompts]
new_tokens = int(os.environ.get("NEW_TOKENS", 256))
methods = [(m, int(g), int(t)) for m, g, t in
           (item.split(":") for item in os.environ.get("METHODS", "plain:1:0,retrieval:16:0,retrieval:16:63").split(","))]
length = max(map(len, encoded)) + new_tokens + 70
warm_up(target, max(g for _, g, _ in methods) + 1, length, tree=max(t for _, _, t in methods))
for method, gamma, tree_size in methods:
    settings = DecodeSettings(max_new_tokens=new_tokens, gamma=gamma, tree=tree_size)
    proposer = make_proposer(method, target)
    run_once(target, proposer, encoded[0], settings, detail=False)  # warm
    totals.clear()
    calls.clear()
    steps = tokens = 0
    start = time.perf_counter()
    for ids in encoded:
        result = run_once(target, proposer, ids, settings, detail=False)
        steps += len(result.steps)
        tokens += len(result.token_ids)
    wall = time.perf_counter() - start
    print(f"== {method}:{gamma}:{tree_size} on {device}: {tokens / wall:.0f} tok/s, tau {tokens / steps:.2f}, "
          f"{wall / steps * 1e6:.0f} us a step", flush=True)
    for label, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"   {label:40s} {seconds / steps * 1e6:8.1f} us a step  ({calls[label] / steps:.2f} calls)")
