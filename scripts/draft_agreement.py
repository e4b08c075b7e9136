"""How often a draft model's next token equals the target's, read two ways, on Spec-Bench prompts (evaluation
only) and the target's own greedy answers to them:

- teacher-forced: the draft model reads the target's whole text in one forward (no cache), as training and its
  held-out estimate read it; the share of answer positions where its argmax is the target's next token;
- in the engine: the `draft` method's share of steps whose first draft was accepted (greedy, at each gamma).

Both count the same thing (a first draft after an accepted prefix), so the second falling clearly below the
first would point at the engine's incremental drafting (its cache, positions, vocabulary mapping); the first
falling below the training log's held-out figure is the drafter meeting prompts unlike its training data.

    python -m scripts.draft_agreement --draft distilled --per-category 1 --tokens 64
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch

from specviz.api import encode, make_proposer, run_once
from specviz.measure.bench import load_prompts
from specviz.models.loading import load_model
from specviz.proposers.checkpoints import load_draft_model
from specviz.proposers.draft_model import to_target_vocabulary
from specviz.settings import DecodeSettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draft", default="distilled", help="'distilled' or a folder from train-drafter")
    parser.add_argument("--prompts", default="data/spec_bench/question.jsonl")
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=64, help="greedy answer tokens a prompt")
    parser.add_argument("--gammas", default="1,4", help="draft lengths run in the engine ('' for none)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    target = load_model("default", args.device, torch.float32)
    draft = load_draft_model(args.draft, target)
    gammas = [int(g) for g in args.gammas.split(",") if g]
    totals = defaultdict(lambda: [0.0, 0])  # (key) -> [hits, count]
    by_category = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    for prompt in load_prompts(args.prompts, per_category=args.per_category):
        ids = encode(target, prompt["prompt"])
        greedy = DecodeSettings(max_new_tokens=args.tokens, stop_at_eos=False)
        answer = run_once(target, make_proposer("plain", target), ids, greedy, detail=False).token_ids
        sequence = torch.tensor([ids + answer], device=target.device)
        with torch.inference_mode():
            logits = draft.model(input_ids=sequence, use_cache=False).logits[0]
        choice = to_target_vocabulary(logits, getattr(draft.model, "draft_vocab", None), target.vocab_size).argmax(-1)
        hits = choice[len(ids) - 1: -1].cpu() == torch.tensor(answer)  # position j predicts token j + 1
        counts = {"teacher-forced": (float(hits.sum()), hits.numel())}
        for gamma in gammas:
            settings = DecodeSettings(max_new_tokens=args.tokens, gamma=gamma, stop_at_eos=False)
            metrics = run_once(target, make_proposer("draft", target, draft), ids, settings, detail=False).metrics
            counts[f"engine gamma {gamma}"] = (metrics.per_position_acceptance[0] * metrics.steps, metrics.steps)
        for key, (hit, count) in counts.items():
            for table in (totals, by_category[prompt["category"]]):
                table[key][0] += hit
                table[key][1] += count
        print(json.dumps({"id": prompt["prompt_id"], "category": prompt["category"],
                          **{k: round(h / max(1, c), 3) for k, (h, c) in counts.items()}}), flush=True)
    print("first-draft agreement (share of positions or steps):")
    for category, table in [*by_category.items(), ("all", totals)]:
        print(f"  {category:15s} " + "  ".join(f"{k} {h / max(1, c):.3f}" for k, (h, c) in table.items()))


if __name__ == "__main__":
    main()
