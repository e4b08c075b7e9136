"""Where a GPU step's time goes: wall per step against GPU kernel time per step (torch.profiler), for each
method of METHODS (METHOD:GAMMA:TREE, default plain:1:0,ngram:16:0,eagle:7:63), on 6 Spec-Bench prompts (one
per category, 256 tokens, bf16); plus the kernels and host calls that cost most (torch.profiler tables,
cProfile). On the GPU machine, from the repository's root with Spec-Bench's data/spec_bench/question.jsonl there:
python3 -m scripts.gpu_step_profile > profile.txt"""
import cProfile, io, os, pstats, time, torch
from torch.profiler import profile, ProfilerActivity
from specviz.api import make_proposer, encode, run_once, warm_up
from specviz.models import load_model
from specviz.bench import load_prompts
from specviz import DecodeSettings

out = os.environ.get("OUT", ".")
target = load_model("default", device="cuda", dtype=torch.bfloat16)
prompts = load_prompts("data/spec_bench/question.jsonl", per_category=1)[:6]
encoded = [encode(target, p["prompt"]) for p in prompts]
length = max(map(len, encoded)) + 256 + 70
methods = [(m, int(g), int(t)) for m, g, t in
           (item.split(":") for item in os.environ.get("METHODS", "plain:1:0,ngram:16:0,eagle:7:63").split(","))]
warm_up(target, max(g for _, g, _ in methods) + 1, length, tree=max(t for _, _, t in methods))
for m, g, t in methods:
    warm_up(target, g + 1, length, [make_proposer(m, target)], tree=t)
for m, g, t in methods:
    settings = DecodeSettings(max_new_tokens=256, gamma=g, tree=t)
    proposer = make_proposer(m, target)
    for ids in encoded[:2]:
        run_once(target, proposer, ids, settings, detail=False)
    t0 = time.perf_counter(); steps = 0; toks = 0; dv = 0.0
    for ids in encoded:
        r = run_once(target, proposer, ids, settings, detail=False)
        steps += len(r.steps); toks += len(r.token_ids); dv += sum(s.draft_ms + s.verify_ms for s in r.steps)
    wall = time.perf_counter() - t0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for ids in encoded:
            run_once(target, proposer, ids, settings, detail=False)
    events = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in events)
    print(f"== {m}:{g}:{t}: {toks / wall:.0f} tok/s, {steps} steps, wall/step {wall / steps * 1e3:.3f} ms, "
          f"draft+verify/step {dv / steps:.3f} ms, GPU kernels/step {gpu_us / steps / 1e3:.3f} ms", flush=True)
    print(events.table(sort_by="self_device_time_total", row_limit=18, max_name_column_width=60))
    print(events.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))
    pr = cProfile.Profile(); pr.enable()
    for ids in encoded:
        run_once(target, proposer, ids, settings, detail=False)
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(s.getvalue())
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats("specviz", 30); print(s.getvalue())
