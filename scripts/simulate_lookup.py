"""Greedy tau of the model-free drafters (ngram, retrieval), simulated from stored plain outputs, in seconds on a
CPU. A lookup drafter's draft depends only on the text so far, and greedy verification accepts the longest
draft path that matches what the target writes next: replaying the plain output through the drafter gives the
tokens each step would accept (exact where the speculative output equals the plain one; in bfloat16 it
diverges on some prompts, so measured tau differs a little).

    python -m scripts.simulate_lookup runs/bench.json \\
        --methods ngram:16,retrieval:16,retrieval:16:63 [--heads FOLDER]

The results file must come from `specviz bench` (its rows keep each output's token ids); the prompts are read
from the file it names (`data/spec_bench/question.jsonl`) and encoded with the default target's chat template.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

from specviz.api import encode
from specviz.measure.bench import load_prompts
from specviz.models.loading import load_model
from specviz.proposers.checkpoints import load_drafter
from specviz.proposers.ngram import NgramIndex
from specviz.proposers.retrieval import RetrievalProposer, heaviest_line
from specviz.rule.tree import children, weighted_trie


def accepted(tokens: list[int], parents: list[int] | None, truth: list[int]) -> int:
    """Draft tokens a greedy verifier accepts when the target then writes `truth`."""
    if parents is None:
        n = 0
        while n < min(len(tokens), len(truth)) and tokens[n] == truth[n]:
            n += 1
        return n
    kids, node, n = children(parents), -1, 0
    while n < len(truth):
        node = next((child for child in kids[node + 1] if tokens[child] == truth[n]), None)
        if node is None:
            break
        n += 1
    return n


def steps_for(prompt: list[int], output: list[int], draft) -> int:
    """Target forwards a run takes: each step accepts what matches, then adds one token."""
    index = NgramIndex(3, 1)
    index.extend(prompt)
    done = steps = 0
    while done < len(output):
        room = len(output) - done - 1
        tokens, parents = draft(index, room)
        step = output[done:done + accepted(tokens, parents, output[done:done + room]) + 1]
        index.extend(step)
        done += len(step)
        steps += 1
    return steps


def drafter(method: str, gamma: int, tree: int, retrieval: RetrievalProposer | None):
    def draft(index: NgramIndex, room: int):
        length = min(gamma, room)
        if length <= 0:
            return [], None
        candidates = retrieval.candidates(index, length) if method == "retrieval" else index.candidates(length)
        if tree:
            return weighted_trie(candidates, tree)
        if method == "retrieval":
            return heaviest_line(candidates, length), None
        return index.continuation(length)[0], None
    return draft


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results")
    parser.add_argument("--methods", default="ngram:16,retrieval:16,retrieval:16:63")
    parser.add_argument("--heads", default=None, help="retrieval datastore folder (default: the shipped one)")
    args = parser.parse_args(argv)
    data = json.load(open(args.results))
    target = load_model("default", device="cpu")
    prompts = {p["prompt_id"]: p for p in load_prompts(data["config"]["prompts_file"])}
    plain = [row for row in data["results"] if row["method"] == "plain"]
    encoded = {row["prompt_id"]: encode(target, prompts[row["prompt_id"]]["prompt"]) for row in plain}
    retrieval = RetrievalProposer(load_drafter("retrieval", target, args.heads))
    for spec in args.methods.split(","):
        method, gamma, tree = (spec.split(":") + ["0", "0"])[:3]
        draft = drafter(method, int(gamma), int(tree), retrieval)
        per_category = defaultdict(lambda: [0, 0])
        for row in plain:
            counts = per_category[row["category"]]
            counts[0] += len(row["token_ids"])
            counts[1] += steps_for(encoded[row["prompt_id"]], row["token_ids"], draft)
        tokens, forwards = (sum(c[i] for c in per_category.values()) for i in (0, 1))
        lowest = min(per_category, key=lambda c: per_category[c][0] / per_category[c][1])
        print(f"{spec:20s} tau {tokens / forwards:.3f} over {len(plain)} prompts; lowest: {lowest} "
              f"{per_category[lowest][0] / per_category[lowest][1]:.2f}")


if __name__ == "__main__":
    main()
