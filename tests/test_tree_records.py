"""Each tree step's record lists every candidate of its tree (token, parent, on the accepted path or not, p), on
the host loop and the device loop alike, and the JSON of a run carries it. Tiny random models and the default."""
import json

import pytest

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from specviz.proposers import PlainProposer

from test_engine import PROMPT
from test_tree import OracleTree


def check_tree(step):
    """What every tree step's record must hold, whatever the loop."""
    assert len(step.tree) == step.tree_size > 1
    path = [i for i, node in enumerate(step.tree) if node.on_path]
    # the accepted path runs down from the root, one node a depth, each the next accepted draft
    assert [step.tree[i].parent for i in path] == ([-1] + path)[:len(path)]
    assert [step.tree[i].token_id for i in path] == [p.token_id for p in step.positions[:len(path)]]
    assert len(path) == step.n_accepted
    assert all(-1 <= node.parent < i for i, node in enumerate(step.tree))  # a parent comes before its child
    assert all(step.tree[i].tried for i in path)


def lines(tree):
    """Each node as the tokens from the root down to it, with whether it is on the accepted path."""
    def line(i):
        return () if i < 0 else line(tree[i].parent) + (tree[i].token_id,)
    return {line(i): node.on_path for i, node in enumerate(tree)}


def test_the_host_loop_records_every_node_and_the_accepted_path(tiny_target):
    settings = DecodeSettings(max_new_tokens=24, gamma=4, tree=12)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, OracleTree(PROMPT + plain.token_ids, tiny_target.vocab_size), PROMPT, settings)
    first = result.steps[0]
    check_tree(first)
    assert sum(node.on_path for node in first.tree) == 4  # the right token, last of three siblings, at each depth
    assert sum(node.tried for node in first.tree) == 12  # every sibling up to the right one was judged
    assert all(0 <= node.p <= 1 and node.q is None and node.text for node in first.tree)  # detailed: p and text
    wrong = next(node for node in first.tree if not node.on_path)
    right = next(node for node in first.tree if node.on_path)
    assert right.p > wrong.p  # greedy: the accepted token is the target's most probable
    lean = run_once(tiny_target, OracleTree(PROMPT + plain.token_ids, tiny_target.vocab_size), PROMPT, settings,
                    detail=False)
    assert [n.token_id for n in lean.steps[0].tree] == [n.token_id for n in first.tree]
    assert all(node.p is None for node in lean.steps[0].tree)  # a lean record reads no p
    chain = run_once(tiny_target, make_proposer("ngram", tiny_target), PROMPT, DecodeSettings(max_new_tokens=12))
    assert all(step.tree == [] for step in chain.steps)  # the control: a chain has no tree


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_the_device_loop_records_the_same_trees_as_the_host_loop(default_target, monkeypatch, temperature):
    settings = DecodeSettings(max_new_tokens=32, gamma=4, tree=15, temperature=temperature, seed=3)
    ids = encode(default_target, "List the numbers from 1 to 20 separated by commas.")
    runs = {}
    for mode in ("0", "force"):
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
        runs[mode] = run_once(default_target, make_proposer("retrieval", default_target), ids, settings)
    host, device = runs["0"], runs["force"]
    assert (host.settings["loop"], device.settings["loop"]) == ("host", "device")
    trees = [s for s in device.steps if s.tree_size]
    assert trees
    for step in trees:
        check_tree(step)
    compared = 0
    for h, d in zip(host.steps, device.steps):
        if temperature == 0 and h.tree_size and d.tree_size and h.gamma == d.gamma:
            assert lines(h.tree) == lines(d.tree)  # the same tree, whatever order each loop numbers it in
            compared += 1
    assert compared or temperature  # greedy, the two loops take the same steps
    if temperature:
        assert all(n.p is not None for s in trees for n in s.tree)  # sampled: the log holds each node's p


def test_the_run_s_json_carries_each_tree(tiny_target):
    settings = DecodeSettings(max_new_tokens=12, gamma=4, tree=12)
    plain = run_once(tiny_target, PlainProposer(), PROMPT, settings)
    result = run_once(tiny_target, OracleTree(PROMPT + plain.token_ids, tiny_target.vocab_size), PROMPT, settings)
    steps = json.loads(json.dumps(result.to_dict()))["steps"]
    tree = steps[0]["tree"]
    assert len(tree) == 12 and {"token_id", "parent", "on_path", "tried", "p", "q", "text"} <= set(tree[0])
    assert sum(node["on_path"] for node in tree) == steps[0]["n_accepted"]
