"""How often a DFlash drafter's first draft is right, two ways, on the target's own greedy answers: teacher-forced
(at every position of the answer: the context's features fed at once, one block drafted, as training evaluates)
and in the engine (`dflash` run greedy: the share of steps whose first draft was accepted). Equal figures mean the
engine drafts as the drafter was trained; what is left is the drafter's own agreement with the target.

    python -m scripts.dflash_agreement --per-category 1 --tokens 64                 # the shipped drafter, CPU
    python -m scripts.dflash_agreement --heads DIR --device cuda --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import sys

import torch

from specviz import load_model
from specviz.api import encode, make_proposer, run_once
from specviz.measure.bench import load_prompts
from specviz.proposers import PlainProposer
from specviz.proposers.dflash_net import draft_block, feed_context
from specviz.runners.static import make_runner
from specviz.settings import DecodeSettings


@torch.inference_mode()
def teacher_forced(drafter, runner, ids: list[int], answer: list[int]) -> tuple[int, int, int]:
    """(positions, first drafts right, drafts right in a row summed) over the answer's anchors."""
    sequence = torch.tensor(ids + answer, device=drafter.device)
    runner.reset()
    _, features = runner.forward(sequence)
    block = drafter.config.block_size
    positions = first = run = 0
    for anchor in range(len(ids) - 1, len(sequence) - 1):
        cache = drafter.new_cache(len(sequence) + block + 1)
        feed_context(drafter, cache, features[:anchor], torch.arange(anchor, device=drafter.device))
        hidden = draft_block(drafter, cache, sequence[anchor:anchor + 1],
                             torch.tensor([anchor], device=drafter.device), anchor + block)[1:]
        scores = drafter.head.sub_logits(hidden).argmax(-1)
        guess = scores if drafter.head.token_ids is None else drafter.head.token_ids[scores]
        truth = sequence[anchor + 1:anchor + block]
        right = (guess[:len(truth)] == truth).int().cumprod(0)
        positions, first, run = positions + 1, first + int(right[0]), run + int(right.sum())
    return positions, first, run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", default="data/spec_bench/question.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="at most this many prompts")
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens of each greedy answer")
    parser.add_argument("--heads", default=None, help="a DFlash drafter's folder (default: the shipped one)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--gamma", type=int, default=15)
    args = parser.parse_args(argv)
    target = load_model("default", device=args.device, dtype=args.dtype)
    proposer = make_proposer("dflash", target, heads=args.heads)
    drafter = proposer.drafter
    runner = make_runner(target.model, features=drafter.target_layers, exact=False)
    settings = DecodeSettings(max_new_tokens=args.tokens, gamma=args.gamma)
    totals = {"positions": 0, "first": 0, "run": 0, "steps": 0, "accepted_first": 0, "accepted": 0}
    rows = []
    for prompt in load_prompts(args.prompts, args.limit, args.per_category):
        ids = encode(target, prompt["prompt"])
        plain = run_once(target, PlainProposer(), ids, settings, detail=False)
        spec = run_once(target, proposer, ids, settings, detail=False)
        positions, first, run = teacher_forced(drafter, runner, ids, plain.token_ids)
        steps = len(spec.steps)
        accepted_first = sum(step.n_accepted >= 1 for step in spec.steps)
        row = {"category": prompt["category"], "equal_to_plain": spec.token_ids == plain.token_ids,
               "teacher_forced_first": round(first / positions, 3), "teacher_forced_tau": round(1 + run / positions, 3),
               "engine_first": round(accepted_first / steps, 3),
               "engine_tau": round(spec.metrics.mean_accepted_length, 3)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        for key, value in (("positions", positions), ("first", first), ("run", run), ("steps", steps),
                           ("accepted_first", accepted_first), ("accepted", spec.metrics.accepted)):
            totals[key] += value
    summary = {"teacher_forced_first": round(totals["first"] / totals["positions"], 3),
               "teacher_forced_tau": round(1 + totals["run"] / totals["positions"], 3),
               "engine_first": round(totals["accepted_first"] / totals["steps"], 3),
               "engine_tau": round(1 + totals["accepted"] / totals["steps"], 3),
               "all_equal_to_plain": all(r["equal_to_plain"] for r in rows)}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
