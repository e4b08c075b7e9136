"""Replay greedy Medusa draft trees offline: how many tokens a step each tree shape would give (tau), without
running the verifier. Greedy verification of a tree accepts its deepest node whose path equals the target's
greedy continuation, so with the continuation and the target's hidden states known (one forward pass over
prompt + answer), every step can be replayed. Figures match `specviz bench` up to numerical noise (the bench
verifies with other batch shapes; bf16 more so).

    python -m scripts.medusa_sim --prompts data/spec_bench/question.jsonl --per-category 2 \
        --cache runs/greedy-26.json --trees 63,127,255 [--heads FOLDER] [--full-vocab]

Continuations are cached (--cache), so a second call only replays. Evaluation only: nothing here trains.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import torch

from specviz.measure.bench import load_prompts
from specviz.models.loading import DEFAULT_MODEL, load_model
from specviz.proposers.checkpoints import load_drafter
from specviz.proposers.draft_head import DraftHead, TargetParts
from specviz.proposers.medusa import TREE_TOP_K
from specviz.settings import DecodeSettings
from specviz.train.data import _stop_id, continue_batch
from specviz.rule.tree import depths, product_tree, walk_greedy


@torch.inference_mode()
def hidden_states(target, ids: list[int]) -> torch.Tensor:
    """The target's last hidden state at every position, [T, H] (what the engine hands a drafter)."""
    return target.model.get_decoder()(input_ids=torch.tensor([ids], device=target.device)).last_hidden_state[0]


def replay(answer: list[int], tops: tuple[torch.Tensor, torch.Tensor], prompt_length: int, budget: int,
           depth: int) -> tuple[int, int]:
    """(steps, tokens) of a greedy run whose trees come from tops = (ids, log probs) [heads, T, k]."""
    ids, values = (t[:depth].transpose(0, 1).tolist() for t in tops)  # [T][heads][k], read once
    known, steps, end = prompt_length + 1, 0, prompt_length + len(answer)  # first answer token from prefill
    full = [None] * prompt_length + answer + [None] * (depth + 1)  # None past the end: never matched
    while known < end:
        at = known - 2  # the hidden state of the position before the last token
        tokens, parents = product_tree(list(zip(ids[at], values[at])), budget)
        # the target's greedy choice after the root and after each node is the answer's next token there
        choices = [full[known]] + [full[known + d] for d in depths(parents)]
        known += len(walk_greedy(tokens, parents, choices).path) + 1
        steps += 1
    return steps, len(answer)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--per-category", type=int)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--cache", required=True, help="JSON of greedy continuations (written when missing)")
    parser.add_argument("--heads", default=None)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--trees", default="63,127")
    parser.add_argument("--depth", type=int, default=5)
    parser.add_argument("--top-k", type=int, default=TREE_TOP_K)
    parser.add_argument("--depth-bonus", type=float, default=0.0,
                        help="added to every head's log probs (a path of depth d gains d times it)")
    parser.add_argument("--full-vocab", action="store_true", help="score every token, not only the draft vocabulary")
    parser.add_argument("--batch", type=int, default=1, help="write missing continuations in left-padded batches "
                        "of this many (on a GPU; batched numerics may differ slightly from single runs)")
    parser.add_argument("--replay-limit", type=int, default=None, help="replay only the first N prompts")
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    args = parser.parse_args(argv)

    target = load_model(DEFAULT_MODEL, device=args.device, dtype=args.dtype)
    prompts = load_prompts(args.prompts, args.limit, args.per_category)
    cache_file = Path(args.cache)
    cache = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    start = time.monotonic()
    missing = [p for p in prompts if str(p["prompt_id"]) not in cache]
    stop = _stop_id(target)
    encoded = sorted(((target.encode_prompt(p["prompt"]), str(p["prompt_id"])) for p in missing),
                     key=lambda e: len(e[0]))
    for at in range(0, len(encoded), args.batch):  # shortest first: little padding
        chunk = encoded[at: at + args.batch]
        answers = continue_batch(target, [ids for ids, _ in chunk], args.max_new_tokens, DecodeSettings(),
                                 torch.Generator(device=target.device), stop)
        for (ids, key), new in zip(chunk, answers):
            cache[key] = {"prompt_ids": ids, "answer": new}
        print(f"{at + len(chunk)}/{len(encoded)} continuations, {time.monotonic() - start:.0f}s", flush=True)
        cache_file.write_text(json.dumps(cache))
    cache_file.write_text(json.dumps(cache))

    drafter = load_drafter("medusa", target, args.heads)
    if args.full_vocab:
        config = target.model.config
        parts = TargetParts(target.model, config.hidden_size // config.num_attention_heads)
        drafter.outputs = [DraftHead.from_target(parts, None)]
    budgets = [int(b) for b in args.trees.split(",")]
    totals = {b: defaultdict(lambda: [0, 0]) for b in budgets}
    hits = torch.zeros(drafter.heads.num_heads, 3)  # top-1 hits, top-k hits, positions
    for p in prompts[: args.replay_limit]:
        row = cache[str(p["prompt_id"])]
        ids = row["prompt_ids"] + row["answer"]
        hidden = hidden_states(target, ids).to(drafter.outputs[0].weight.dtype)
        tops = drafter.top_tokens(hidden, drafter.heads.num_heads, args.top_k)  # [heads, T, k]
        tops = (tops[0], tops[1] + args.depth_bonus)
        prompt_length = len(row["prompt_ids"])
        full = torch.tensor(ids)
        for h in range(drafter.heads.num_heads):  # head h at position t guesses token t + 2 + h
            positions = torch.arange(prompt_length - 1, len(ids) - 2 - h)
            if len(positions):
                truth = full[positions + 2 + h]
                guesses = tops[0][h, positions].cpu()
                hits[h, 0] += (guesses[:, 0] == truth).sum()
                hits[h, 1] += (guesses == truth[:, None]).any(-1).sum()
                hits[h, 2] += len(positions)
        for budget in budgets:
            steps, tokens = replay(row["answer"], tops, prompt_length, budget, min(args.depth, drafter.heads.num_heads))
            for group in ("overall", p["category"]):
                totals[budget][group][0] += steps
                totals[budget][group][1] += tokens
    print(f"heads {drafter.source}, full vocab {args.full_vocab}, top-k {args.top_k}, depth {args.depth}, "
          f"depth bonus {args.depth_bonus}, {len(prompts)} prompts")
    print("per head (token t+2+h): top-1 " + " ".join(f"{hits[h, 0] / hits[h, 2]:.3f}" for h in range(len(hits)))
          + " | top-k " + " ".join(f"{hits[h, 1] / hits[h, 2]:.3f}" for h in range(len(hits))))
    for budget in budgets:
        groups = totals[budget]
        # tau: new tokens / verify steps, as the bench counts it (the prefill's token included)
        line = " ".join(f"{g} {t / s:.2f}" for g, (s, t) in sorted(groups.items()) if g != "overall")
        print(f"tree {budget}: tau {groups['overall'][1] / groups['overall'][0]:.3f} | {line}")


if __name__ == "__main__":
    main()
