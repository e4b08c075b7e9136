"""The exact mode on a GPU (runners/exact.py): one forward over K positions, a chain or a draft tree, gives bit for
bit the logits and the keys and values that K one-position forwards over the same cache give. The control: the
same comparison with the mode off finds a difference (bfloat16 rounds by shape). Skipped without CUDA and
Triton; the default model's test also needs its file (on the GPU machine: SPECVIZ_DEFAULT_GGUF, docs/gpu.md)."""
import pytest
import torch

from specviz.runners import gpu_attention
from specviz.runners.static import StaticRunner
from specviz.rule.tree import depths as tree_depths

needs_triton = pytest.mark.skipif(
    not (torch.cuda.is_available() and gpu_attention.supported(torch.device("cuda"), torch.bfloat16, 64)),
    reason="needs a CUDA GPU and Triton")

PROMPT = 200  # cached tokens before the compared forwards: past a chunk boundary of the attention kernels
CHAIN = 8
TREE_PARENTS = [-1, -1, 0, 0, 1, 2, 2, 4, -1, 7, 9, 3, 5, 6, 12]  # node i's parent (-1: the root), ids follow


def compare_chain(runner: StaticRunner, ids: torch.Tensor) -> tuple[bool, bool]:
    """(logits equal, cache equal): ids[:PROMPT] cached, then ids[PROMPT:] in one forward against one at a time."""
    prompt, new = ids[:PROMPT], ids[PROMPT:]
    runner.reset()
    runner.forward(prompt, logits_for="none")
    together, _ = runner.forward(new)
    cache_together = [(k.clone(), v.clone()) for k, v in runner.layer_keys_values()]
    runner.rollback(PROMPT)
    alone = torch.cat([runner.forward(new[i:i + 1])[0] for i in range(len(new))])
    cache_alone = runner.layer_keys_values()
    same_cache = all(torch.equal(a, b) for (ka, va), (kb, vb) in zip(cache_together, cache_alone)
                     for a, b in ((ka, kb), (va, vb)))
    return torch.equal(together, alone), same_cache


def compare_tree(runner: StaticRunner, ids: torch.Tensor, parents: list[int]) -> tuple[bool, bool]:
    """(logits equal, keys and values equal): a tree's forward against each node's path fed one at a time."""
    prompt, root, nodes = ids[:PROMPT], int(ids[PROMPT]), ids[PROMPT + 1:PROMPT + 1 + len(parents)].tolist()
    runner.reset()
    runner.forward(prompt, logits_for="none")
    tree_logits, _ = runner.forward([root, *nodes], parents=parents)
    tree_cache = [(k[..., PROMPT:, :].clone(), v[..., PROMPT:, :].clone()) for k, v in runner.layer_keys_values()]
    same_logits = same_cache = True
    node_depths = tree_depths(parents)
    for node in range(-1, len(parents)):  # -1: the root
        path = []
        at = node
        while at != -1:
            path.append(at)
            at = parents[at]
        path = [-1, *reversed(path)]  # the root, then ancestors in depth order, the node last
        runner.rollback(PROMPT)
        for step in path:
            logits, _ = runner.forward([root if step == -1 else nodes[step]])
        same_logits &= torch.equal(logits[-1], tree_logits[node + 1])
        depth = 0 if node == -1 else node_depths[node]
        for (k, v), (tk, tv) in zip(runner.layer_keys_values(), tree_cache):  # the node's own slot, both ways
            same_cache &= torch.equal(k[..., PROMPT + depth, :], tk[..., node + 1, :])
            same_cache &= torch.equal(v[..., PROMPT + depth, :], tv[..., node + 1, :])
    return same_logits, same_cache


def runners_for(model, graphs: bool):
    on = StaticRunner(model, graphs=graphs, exact=True)
    off = StaticRunner(model, graphs=graphs, exact=False)
    assert on.exact and not off.exact, on.exact_reason
    return on, off


def check_model(model, vocab: int, graphs: bool, control: bool = True):
    """The mode on: equal. control: also that the mode off finds a difference (where the usual path is known
    to round by shape: on the random 8B shape with graphs, chains of 8 and trees of 16 happened to round alike)."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (PROMPT + 1 + len(TREE_PARENTS),), generator=generator)
    on, off = runners_for(model, graphs)
    assert compare_chain(on, ids[:PROMPT + CHAIN]) == (True, True)
    assert compare_tree(on, ids, TREE_PARENTS) == (True, True)
    if control:  # without the mode, the wider forward rounds differently
        assert not all(compare_chain(off, ids[:PROMPT + CHAIN]) + compare_tree(off, ids, TREE_PARENTS))
    on.release()
    off.release()


@needs_triton
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_a_random_llama_shape_computes_each_position_as_alone(graphs):
    from specviz.models.random_target import build_random_target

    model, _ = build_random_target("random:llama-8b,layers=4", torch.device("cuda"), torch.bfloat16)
    check_model(model, model.config.vocab_size, graphs, control=not graphs)


@needs_triton
def test_the_default_model_computes_each_position_as_alone():
    from specviz import load_model

    target = load_model("default", device="cuda", dtype="bfloat16")
    check_model(target.model, target.vocab_size, graphs=True)
    check_model(target.model, target.vocab_size, graphs=False)


@needs_triton
def test_greedy_speculative_output_equals_plain_in_bfloat16():
    """End to end through the engine's device loop: a tree method and a chain method on prompts where the mode
    off differs from plain (the control), and the mode on does not."""
    from specviz import load_model
    from specviz.api import generate
    from specviz.options import EngineOptions
    from specviz.settings import DecodeSettings

    target = load_model("default", device="cuda", dtype="bfloat16")
    prompts = ["Write a long story about a lighthouse keeper and the sea, with many details.",
               "Explain how a compiler turns source code into machine code, step by step.",
               "List twenty facts about the history of mathematics, one a line."]
    for method, gamma, tree in (("retrieval", 16, 31), ("ngram", 8, 0)):
        settings = DecodeSettings(max_new_tokens=256, gamma=gamma, tree=tree, stop_at_eos=False)
        differed = 0
        for prompt in prompts:
            outputs = {}
            for exact in (True, False):
                report = generate(prompt, method, target=target, settings=settings, compare_plain=True,
                                  options=EngineOptions(exact=exact))
                outputs[exact] = (report.plain.token_ids, report.result.token_ids,
                                  report.result.settings["exact_forward"])
            plain_ids, run_ids, claimed = outputs[True]
            assert claimed and run_ids == plain_ids, (method, prompt)
            assert not outputs[False][2]
            differed += outputs[False][0] != outputs[False][1]
        assert differed, f"{method}: the mode off matched plain on every prompt; the control shows nothing"
