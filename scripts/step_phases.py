"""A step's host time by phase of the engine's loop: an instrumented copy of specviz/engine.py (a timer mark
after chosen statements of the step loop; the engine itself is untouched), used by api.run_once, over
Spec-Bench prompts (one per category), greedy. Phases that hold a wait for the device show it (verify).
From the repository's root, with question.jsonl there:
    METHODS=plain:1:0,retrieval:16:0,retrieval:16:63 PYTHONPATH=. python3 scripts/step_phases.py [cuda|cpu]"""
import collections, os, sys, time, types, re
import torch
import specviz.engine as engine_module
src = open(engine_module.__file__).read()
acc = collections.defaultdict(float)
last = [0.0]
def _m(label):
    t = time.perf_counter(); acc[label] += t - last[0]; last[0] = t
marks = [  # (regex of the line after which to mark, label)
    (r"step_start = time.perf_counter\(\)", "loop top (yield, consumer)"),
    (r"draft = proposer.propose\(tokens, gamma\)", "propose"),
    (r"draft_end = time.perf_counter\(\) if", "draft checks"),
    (r"logits, hidden = runner.forward\(torch.tensor\(\[sequence", "forward (launch)"),
    (r"verdict = verification.verify_greedy\(", "verify_greedy (wait, accept)"),
    (r"runner.rollback\(cached \+ 1 \+ n\)", "rollback"),
    (r"= self._verify_tree\(draft, draft_ids", "verify tree"),
    (r"verify_end = time.perf_counter\(\)", "verify misc"),
    (r"            sequence.extend\(kept\)", "copy to the device"),
    (r"self.tokens = tokens\n            proposer", None),
    (r"new_ids=kept,\n            \)\)", "observe"),
    (r"record.tree_size = tree_size", "record"),
    (r"tokens_shown.extend\(record.tokens\)", "append"),
]
for pattern, label in marks:
    if label is None:
        continue
    found = list(re.finditer(pattern, src))
    assert len(found) == 1, (pattern, len(found))
    end = src.index("\n", found[0].end() - 1) if not src[found[0].end()-1] == "\n" else found[0].end() - 1
    line_start = src.rindex("\n", 0, found[0].start()) + 1
    indent = re.match(r" *", src[line_start:]).group(0)
    if label in ("observe",):
        indent = " " * 12
    src = src[:end] + f"\n{indent}_m({label!r})" + src[end:]
# the kept loop: mark before the buffer copy
src = src.replace("            staged[len(sequence):", "            _m('kept loop')\n            staged[len(sequence):", 1)
probe = types.ModuleType("specviz.engine_probe")
probe.__dict__["__package__"] = "specviz"
probe.__dict__["_m"] = _m
exec(compile(src, "engine_probe", "exec"), probe.__dict__)
import specviz.api as api
api.SpeculativeRun = probe.SpeculativeRun
from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once, warm_up
from specviz.bench import load_prompts
from specviz.models import load_model
device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
target = load_model("default", device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
prompts = load_prompts("question.jsonl", per_category=1)[:int(os.environ.get("COUNT", 13))]
encoded = [encode(target, p["prompt"]) for p in prompts]
new_tokens = int(os.environ.get("NEW_TOKENS", 256))
methods = [(m, int(g), int(t)) for m, g, t in (i.split(":") for i in os.environ.get("METHODS", "plain:1:0,retrieval:16:0,retrieval:16:63").split(","))]
warm_up(target, max(g for _, g, _ in methods) + 1, max(map(len, encoded)) + new_tokens + 70, tree=max(t for _, _, t in methods))
for method, gamma, tree in methods:
    settings = DecodeSettings(max_new_tokens=new_tokens, gamma=gamma, tree=tree)
    proposer = make_proposer(method, target)
    run_once(target, proposer, encoded[0], settings, detail=False)
    acc.clear(); steps = toks = 0; t0 = time.perf_counter()
    for ids in encoded:
        last[0] = time.perf_counter()
        r = run_once(target, proposer, ids, settings, detail=False)
        steps += len(r.steps); toks += len(r.token_ids)
    wall = time.perf_counter() - t0
    print(f"== {method}:{gamma}:{tree}: {toks/wall:.0f} tok/s, tau {toks/steps:.2f}, {wall/steps*1e6:.0f} us a step; marked {sum(acc.values())/steps*1e6:.0f}")
    for k, v in acc.items():
        print(f"   {k:32s} {v/steps*1e6:8.1f} us")
