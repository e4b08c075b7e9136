"""Detail cost on the GPU, one process: lean records (device loop, and host loop), detail gathered in one read
(the engine's step_figures), and detail read piece by piece (the former way, patched in here)."""
import os, statistics, sys
import torch
import specviz.engine as engine
from specviz.api import encode, make_proposer, run_once, warm_up
from specviz.display import StepFigures, step_figures, TOP_N
from specviz.models import load_model
from specviz.proposers import PlainProposer
from specviz.records import TopTokens
from specviz.settings import DecodeSettings

def piecewise(p_shown, q_shown, draft_ids, row, next_id, next_distribution=None, n=TOP_N):
    def top(probs):
        values, ids = torch.topk(probs, min(n, probs.shape[-1]), dim=-1)
        return [TopTokens(ids=i, probs=v) for i, v in zip(ids.tolist(), values.tolist())]
    g = len(draft_ids)
    def of(probs):
        rows = torch.arange(g, device=probs.device)
        return probs[rows, torch.tensor(draft_ids, dtype=torch.long, device=probs.device)].tolist()
    p_of = of(p_shown) if g else []
    q_of = of(q_shown) if g and q_shown is not None else [None] * g
    p_tops = top(p_shown)
    q_tops = top(q_shown) if q_shown is not None else [None] * g
    nt = top((p_shown[row] if next_distribution is None else next_distribution).unsqueeze(0))[0]
    return StepFigures(p_of, q_of, p_tops, q_tops, nt, float(p_shown[row, next_id]))

P = "Explain how a hash map handles collisions, then write a short Python function that counts the words in a text with a dictionary, and explain it line by line."
t = load_model("default", device="cuda", dtype=torch.bfloat16); s = DecodeSettings(max_new_tokens=128, gamma=8); ids = encode(t, P)
warm_up(t, 9, len(ids) + 128 + 9, [make_proposer("ngram", t)])
def go(method, way):
    os.environ["SPECVIZ_DEVICE_LOOP"] = "0" if way == "lean-host" else "1"
    engine.step_figures = piecewise if way == "detail-piecewise" else step_figures
    p = PlainProposer() if method == "plain" else make_proposer("ngram", t)
    r = run_once(t, p, ids, s, P, detail=way.startswith("detail"))
    return r.metrics.tokens_per_second, r.settings["loop"], r.token_ids
ways = ["lean-device", "lean-host", "detail-gathered", "detail-piecewise"]
for m in ("plain", "ngram"):
    for w in ways: go(m, w)
res = {}
for rep in range(3):
    for m in ("plain", "ngram"):
        for w in ways:
            tps, loop, out = go(m, w)
            res.setdefault((m, w), []).append(tps)
            res.setdefault((m, "out"), set()).add(tuple(out))
for m in ("plain", "ngram"):
    base = statistics.median(res[(m, "lean-device")])
    print(m, "distinct outputs:", len(res[(m, "out")]))
    for w in ways:
        med = statistics.median(res[(m, w)])
        print(f"{m:6s} {w:18s} {med:8.1f} tok/s  {med / base:.2f} of lean-device  runs={[round(x) for x in res[(m, w)]]}")
