"""The fast path (specviz/runners/): the static-cache forward computes what transformers computes, rolling
back is free and exact, the engine gives the same output with it, weights packed for oneDNN and compiled
layers change nothing, and graphs replay what the eager forward computes. Correctness only: no timing is
asserted (timings are reported by the bench). The CUDA tests (graphs, compile, the attention kernel) run
where a GPU is present and are skipped elsewhere."""
import random
import shutil

import pytest
import torch

from specviz import DecodeSettings
from specviz.api import make_proposer, run_once
from specviz.models.loading import LoadedModel
from specviz.proposers import PlainProposer
from specviz.runners.causal import CausalRunner
from specviz.runners.llama import unsupported_reason
from specviz.runners.onednn import PackedLinear, onednn_linear, pack_linears, pack_matrix
from specviz.runners.static import StaticRunner, cost_curve, make_runner
from specviz.models.testing import perturbed_copy, tiny_causal_lm

PROMPT = [3, 7, 1, 3, 7, 2, 9, 3, 7]


def tiny_model(kind: str, seed: int = 0):
    """Tiny random models of the architectures the fast path supports, with their quirks switched on."""
    from transformers import (
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    common = dict(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False,
                  bos_token_id=None, eos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    if kind == "llama-bias":  # attention and mlp biases, tied embeddings
        model = LlamaForCausalLM(LlamaConfig(**{**common, "tie_word_embeddings": True}, attention_bias=True,
                                             mlp_bias=True))
    elif kind == "qwen2":  # q/k/v biases
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    elif kind == "mistral-window":  # a sliding window shorter than the sequences below
        model = MistralForCausalLM(MistralConfig(**common, sliding_window=6))
    else:
        raise ValueError(kind)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1 and parameter.std() == 0:  # biases start at zero, norms at one: vary them
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model.float().eval()


def assert_runners_agree(model, steps, atol=1e-5):
    """Feed the same forwards and rollbacks to both runners; logits, hidden states and caches must agree."""
    fast, reference = StaticRunner(model), CausalRunner(model)
    vocab = model.get_output_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    for action, amount in steps:
        if action == "feed":
            ids = torch.randint(0, vocab, (amount,), generator=generator)
            logits, hidden = fast.forward(ids)
            logits0, hidden0 = reference.forward(ids)
            torch.testing.assert_close(logits, logits0, atol=atol, rtol=1e-4)
            torch.testing.assert_close(hidden, hidden0, atol=atol, rtol=1e-4)
        else:
            fast.rollback(fast.length - amount)
            reference.rollback(reference.length - amount)
        assert fast.length == reference.length
    for (k, v), (k0, v0) in zip(fast.layer_keys_values(), reference.layer_keys_values()):
        torch.testing.assert_close(k, k0, atol=atol, rtol=1e-4)
        torch.testing.assert_close(v, v0, atol=atol, rtol=1e-4)


STEPS = [("feed", 11), ("feed", 1), ("feed", 5), ("drop", 3), ("feed", 4), ("drop", 4), ("feed", 1), ("feed", 9),
         ("drop", 1), ("feed", 70)]  # the last one grows the cache past its first capacity


def test_static_runner_matches_transformers_on_llama(tiny_target):
    assert_runners_agree(tiny_target.model, STEPS)


@pytest.mark.parametrize("kind", ["llama-bias", "qwen2", "mistral-window"])
def test_static_runner_matches_transformers_on_other_architectures(kind):
    assert unsupported_reason(tiny_model(kind)) is None
    assert_runners_agree(tiny_model(kind), STEPS)


def test_static_runner_matches_transformers_on_the_default_model(default_target):
    assert_runners_agree(default_target.model, [("feed", 40), ("feed", 5), ("drop", 3), ("feed", 2)], atol=2e-4)


def test_fused_weights_leave_the_model_unchanged(tiny_target):
    """The fast path fuses q/k/v and gate/up and makes the model's own parameters views into them: the
    model's transformers forward must give what it gave before."""
    model = perturbed_copy(tiny_target, noise=0.3, seed=7).model
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        before = model(ids).logits
        StaticRunner(model)
        after = model(ids).logits
    torch.testing.assert_close(before, after, atol=0, rtol=0)
    attention = model.model.layers[0].self_attn
    assert attention.q_proj.weight.untyped_storage().data_ptr() == attention.v_proj.weight.untyped_storage().data_ptr()


needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs PyTorch's oneDNN")


@needs_onednn
def test_prepacked_products_do_not_depend_on_the_rows_beside():
    """Packed for oneDNN, a row's product is bitwise the same alone or among others: a K-position verify
    computes what K one-position forwards would (the attention apart)."""
    generator = torch.Generator().manual_seed(3)
    weight, bias = torch.randn(300, 96, generator=generator), torch.randn(300, generator=generator)
    packed = pack_matrix(weight)
    for rows in (2, 5, 9, 17, 33):
        x = torch.randn(rows, 96, generator=generator)
        together = onednn_linear(x, packed, bias)
        alone = torch.cat([onednn_linear(x[i:i + 1], packed, bias) for i in range(rows)])
        assert torch.equal(together, alone)
        torch.testing.assert_close(together, torch.nn.functional.linear(x, weight, bias), atol=1e-4, rtol=1e-4)


@needs_onednn
def test_cpu_runner_prepacks_in_float32_only_and_can_be_switched_off(tiny_target, monkeypatch):
    model = tiny_target.model
    assert StaticRunner(model).use_onednn  # and the agreement tests above ran through it
    monkeypatch.setenv("SPECVIZ_ONEDNN", "0")
    plain = StaticRunner(model)
    assert not plain.use_onednn
    monkeypatch.delenv("SPECVIZ_ONEDNN")
    packed = StaticRunner(model)
    ids = torch.tensor(PROMPT)
    torch.testing.assert_close(packed.forward(ids)[0], plain.forward(ids)[0], atol=1e-5, rtol=1e-4)
    half = tiny_model("llama-bias").to(torch.bfloat16)
    assert not StaticRunner(half).use_onednn


@needs_onednn
def test_packed_linears_keep_a_drafters_outputs_and_state():
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.SiLU(), torch.nn.Linear(40, 24, bias=False)).eval()
    x = torch.randn(2, 7, 24)
    with torch.no_grad():
        before, state = net(x), {k: v.clone() for k, v in net.state_dict().items()}
        assert pack_linears(net) == 2 and isinstance(net[0], PackedLinear)
        torch.testing.assert_close(net(x), before, atol=1e-5, rtol=1e-4)
    assert net.state_dict().keys() == state.keys()
    assert pack_linears(torch.nn.Linear(4, 4).to(torch.bfloat16)) == 0  # float32 only


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="torch.compile on a CPU needs a C++ compiler")
def test_compiled_layers_serve_spans_shorter_than_the_one_first_traced(tiny_target, recwarn):
    """torch.compile once took the cache and the span for one size when it first traced them equal (a span
    that fills the cache), then failed on every shorter span (seen on the GPU in float32). Here a first
    forward fills the cache exactly, the next ones do not; compiled must agree with eager, without falling back."""
    import specviz.runners.static as static

    model = tiny_target.model
    compiled = StaticRunner(model, compile=True, onednn=False)
    eager = StaticRunner(model, compile=False, onednn=False)
    vocab = model.get_output_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(1)
    for count in (64, 3, 1, 5):  # 64: the first capacity exactly
        ids = torch.randint(0, vocab, (count,), generator=generator)
        torch.testing.assert_close(compiled.forward(ids)[0], eager.forward(ids)[0], atol=1e-4, rtol=1e-4)
    assert compiled.use_compile and not static._compile_failed
    assert not [w for w in recwarn if "torch.compile failed" in str(w.message)]


def test_unsupported_models_fall_back_to_transformers():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()
    assert "gpt2" in unsupported_reason(model)
    assert isinstance(make_runner(model), CausalRunner)


def test_models_spread_over_devices_take_the_transformers_forward():
    model = tiny_causal_lm(vocab_size=32, seed=4, layers=2).model
    model.model.layers[1].to("meta")  # as accelerate leaves a layer offloaded to disk
    assert "several devices" in unsupported_reason(model)
    assert isinstance(make_runner(model), CausalRunner)


def test_a_tree_of_the_largest_size_replays_in_a_padded_graph_as_eager(monkeypatch):
    """settings.MAX_TREE nodes: one position short of a power of two, so the graph holds no padding node; a
    tree of 600 is padded to the same graph. Stand-in graphs on the CPU, as above."""
    import specviz.runners.static as static
    from specviz.settings import MAX_TREE

    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    monkeypatch.setattr(static, "capture_graph", stand_in_capture)
    model = tiny_causal_lm(vocab_size=32, seed=7, layers=2, context=4096).model
    graphed, eager = StaticRunner(model, graphs=False, compile=False), StaticRunner(model, graphs=False, compile=False)
    graphed.use_graphs = True
    ids = torch.randint(0, 32, (40,))
    graphed.forward(ids), eager.forward(ids)
    rng = random.Random(3)
    for count in (MAX_TREE, 600):
        parents = [rng.randrange(-1, i) if rng.random() < 0.3 else i - 1 for i in range(count)]
        tree_ids = torch.randint(0, 32, (count + 1,))
        (a, ha), (b, hb) = graphed.forward(tree_ids, parents=parents), eager.forward(tree_ids, parents=parents)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)
        graphed.rollback(40), eager.rollback(40)
    assert [key for key in graphed.workspace.graphs if key[2] is True] == [(MAX_TREE + 1, 2048, True)]
    with pytest.raises(ValueError, match=f"more than {MAX_TREE}"):
        eager.forward(torch.randint(0, 32, (MAX_TREE + 2,)), parents=list(range(-1, MAX_TREE)))


def test_environment_switch_forces_transformers(tiny_target, monkeypatch):
    assert isinstance(make_runner(tiny_target.model), StaticRunner)
    monkeypatch.setenv("SPECVIZ_FAST", "0")
    assert isinstance(make_runner(tiny_target.model), CausalRunner)


@pytest.mark.parametrize("method", ["ngram", "draft", "early-exit", "adaptive"])
def test_fast_and_transformers_runners_give_the_same_greedy_output(tiny_target, tiny_drafter, method, monkeypatch):
    settings = DecodeSettings(max_new_tokens=40, gamma=4)
    fast = run_once(tiny_target, make_proposer(method, tiny_target, tiny_drafter), PROMPT, settings)
    monkeypatch.setenv("SPECVIZ_FAST", "0")
    slow = run_once(tiny_target, make_proposer(method, tiny_target, tiny_drafter), PROMPT, settings)
    assert fast.settings["runner"] == "StaticRunner" and slow.settings["runner"] == "CausalRunner"
    assert fast.token_ids == slow.token_ids
    if method != "adaptive":  # adaptive picks draft lengths from measured times, which differ
        assert [(s.gamma, s.n_accepted) for s in fast.steps] == [(s.gamma, s.n_accepted) for s in slow.steps]


def test_runs_reuse_a_released_workspace_but_never_a_live_one(tiny_target):
    first = make_runner(tiny_target.model)
    first.forward(torch.tensor(PROMPT))
    second = make_runner(tiny_target.model)
    assert second.workspace is not first.workspace  # first still holds its cache
    space = first.workspace
    first.release()
    assert make_runner(tiny_target.model).workspace is space


def test_cost_curve_times_every_requested_size(tiny_target):
    curve = cost_curve(tiny_target.model, [1, 2, 5], context=20, repeats=2)
    assert sorted(curve) == [1, 2, 5] and all(ms > 0 for ms in curve.values())


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
def test_graph_replay_equals_eager_forward(tiny_target):
    model = perturbed_copy(tiny_target, noise=0.1, seed=3).model.cuda()
    graphed, eager = StaticRunner(model, graphs=True, compile=False), StaticRunner(model, graphs=False, compile=False)
    ids = torch.randint(0, 32, (60,))
    for runner in (graphed, eager):
        runner.forward(ids[:20], logits_for="last")
    for start, count in [(20, 1), (21, 4), (25, 1), (26, 5)]:
        a, _ = graphed.forward(ids[start:start + count])
        b, _ = eager.forward(ids[start:start + count])
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    graphed.rollback(22)
    eager.rollback(22)
    a, _ = graphed.forward(ids[22:26])
    b, _ = eager.forward(ids[22:26])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@cuda
@pytest.mark.parametrize("context", [1024, 320])
def test_long_inputs_go_through_padded_graph_chunks_as_the_eager_forward_does(context):
    """A prompt longer than MAX_GRAPH_POSITIONS goes through captured graphs of PREFILL_CHUNK positions, the
    last one padded (with a context of 320 the padding does not fit: that chunk runs eagerly): the same
    logits and hidden states as the eager forward, and decoding after it sees none of the padding."""
    from specviz.runners.static import LONG_PREFILL_CHUNK, PREFILL_CHUNK

    model = tiny_causal_lm(vocab_size=32, seed=7, layers=2, context=context).model.cuda()
    graphed, eager = StaticRunner(model, graphs=True, compile=False), StaticRunner(model, graphs=False, compile=False)
    ids = torch.randint(0, 32, (310,))
    count = PREFILL_CHUNK + 44
    (a, ha), (b, hb) = graphed.forward(ids[:count]), eager.forward(ids[:count])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)
    assert graphed.length == eager.length == count and a.shape[0] == count
    # 300 positions: one chunk of 512 where it fits, else a chunk of 256 and the rest eagerly
    assert ((LONG_PREFILL_CHUNK, 512, False) if context == 1024
            else (PREFILL_CHUNK, 256, False)) in graphed.workspace.graphs
    for start in range(count, 308, 2):
        a, _ = graphed.forward(ids[start:start + 2])
        b, _ = eager.forward(ids[start:start + 2])
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    graphed.reset(), eager.reset()
    a, _ = graphed.forward(ids[:count], logits_for="last")
    b, _ = eager.forward(ids[:count], logits_for="last")
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert a.shape[0] == 1
    graphed.reset()
    none, hidden = graphed.forward(ids[:count], logits_for="none")  # chunks without the output layer
    assert none is None
    torch.testing.assert_close(hidden, hb, atol=1e-5, rtol=1e-5)


@cuda
def test_compiled_graphs_give_plain_greedy_output_in_float32(tiny_target, tiny_drafter):
    target = LoadedModel(name="tiny-cuda", model=perturbed_copy(tiny_target, 0.0).model.cuda(), tokenizer=None,
                         device=torch.device("cuda"), dtype=torch.float32)
    settings = DecodeSettings(max_new_tokens=40, gamma=4)
    plain = run_once(target, PlainProposer(), PROMPT, settings)
    assert plain.settings["runner"] == "StaticRunner"
    for method in ("ngram", "early-exit", "adaptive"):
        assert run_once(target, make_proposer(method, target), PROMPT, settings).token_ids == plain.token_ids
    reference = CausalRunner(target.model)
    logits, _ = reference.forward(torch.tensor(PROMPT + plain.token_ids[:-1]))
    assert logits[len(PROMPT) - 1:].argmax(-1).tolist() == plain.token_ids


@cuda
def test_graphs_survive_the_cache_growing(tiny_target):
    """A sequence longer than the first capacity (1024 on a GPU) reallocates the cache: the graphs that
    pointed at the old one are dropped with their memory pool, and new ones are captured."""
    target = tiny_causal_lm(vocab_size=32, seed=6, layers=2, context=4096).model.cuda()
    graphed, eager = StaticRunner(target, graphs=True, compile=False), StaticRunner(target, graphs=False, compile=False)
    ids = torch.randint(0, 32, (1400,))
    for runner in (graphed, eager):
        runner.forward(ids[:1000], logits_for="last")
    for start in range(1000, 1400, 4):  # through the growth at 1024 positions
        a, _ = graphed.forward(ids[start:start + 4])
        b, _ = eager.forward(ids[start:start + 4])
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert graphed.capacity >= 1400


def _triton_ready() -> bool:
    from specviz.runners import gpu_attention

    return torch.cuda.is_available() and gpu_attention.supported(torch.device("cuda"), torch.float32, 16)


triton_cuda = pytest.mark.skipif(not _triton_ready(), reason="needs a CUDA GPU and Triton")


@triton_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_attention_matches_scaled_dot_product_attention(dtype):
    from specviz.runners import gpu_attention
    from specviz.runners.llama import sdpa_attention, tree_attention_mask

    torch.manual_seed(0)
    heads, kv_heads, head_dim, capacity = 9, 3, 64, 1024
    keys = torch.randn(kv_heads, capacity, head_dim, device="cuda", dtype=dtype)
    values = torch.randn(kv_heads, capacity, head_dim, device="cuda", dtype=dtype)
    for count, span, start, tree in [(1, 128, 40, False), (9, 512, 300, False), (33, 512, 257, True),
                                     (200, 256, 0, False), (600, 1024, 300, True)]:  # a large tree: one pass
        # strided, as in a layer
        q = torch.randn(count, heads + kv_heads, head_dim, device="cuda", dtype=dtype)[:, :heads]
        positions = start + torch.arange(count, device="cuda")
        if tree:
            visible = (torch.rand(count, count, device="cuda") < 0.3) | torch.eye(count, dtype=torch.bool,
                                                                                  device="cuda")
            mask = tree_attention_mask(positions[:1], visible, span)
        else:
            mask = torch.arange(span, device="cuda")[None, :] <= positions[:, None]
        expected = sdpa_attention(q, keys[:, :span], values[:, :span], mask, kv_heads)
        got = gpu_attention.attention(q, keys[:, :span], values[:, :span], mask, positions[-1:])
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance)


@triton_cuda
def test_triton_attention_rows_do_not_depend_on_the_rows_beside_them():
    """A token's result is bitwise the same alone or among others and over a shorter span (what makes greedy
    speculation give plain greedy output): the slots it may not see add exactly zero."""
    from specviz.runners import gpu_attention

    torch.manual_seed(1)
    keys, values = torch.randn(2, 2, 256, 16, device="cuda").unbind(0)
    q = torch.randn(6, 4, 16, device="cuda")
    positions = 100 + torch.arange(6, device="cuda")
    mask = torch.arange(256, device="cuda")[None, :] <= positions[:, None]
    together = gpu_attention.attention(q, keys, values, mask, positions[-1:])
    for i in range(6):
        span = 128 + 64 * (i % 3)  # and whatever the span: the chunks are fixed by slot
        alone = gpu_attention.attention(q[i:i + 1], keys[:, :span], values[:, :span], mask[i:i + 1, :span],
                                        positions[i:i + 1])
        assert torch.equal(alone[0], together[i])


@triton_cuda
def test_runner_with_triton_attention_equals_sdpa_runner():
    """Chains and trees, graphs on, float32: the same logits as with scaled_dot_product_attention."""
    model = tiny_causal_lm(vocab_size=32, seed=7, hidden=64).model.cuda()  # head size 16: the kernel's smallest
    triton_runner = StaticRunner(model, compile=False)
    sdpa_runner = StaticRunner(model, compile=False, triton_attention=False)
    assert triton_runner.use_triton_attention and not sdpa_runner.use_triton_attention
    ids = torch.randint(0, 32, (80,))
    for runner in (triton_runner, sdpa_runner):
        runner.forward(ids[:30], logits_for="last")
    for start, count in [(30, 1), (31, 5), (36, 1)]:
        a, _ = triton_runner.forward(ids[start:start + count])
        b, _ = sdpa_runner.forward(ids[start:start + count])
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    a, _ = triton_runner.forward(ids[37:43], parents=[-1, 0, 0, 1, 2])
    b, _ = sdpa_runner.forward(ids[37:43], parents=[-1, 0, 0, 1, 2])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


class StandInGraph:
    """A CUDA graph's stand-in on the CPU: replay runs the captured function again and writes into the outputs
    of the capture, as a real replay does, so that the bookkeeping around graphs (keys, static inputs, padding,
    chunks) is tested without a GPU."""
    def replay(self):
        outputs, fresh = self.outputs, self.run()
        for static, new in zip(outputs, fresh) if isinstance(outputs, tuple) else [(outputs, fresh)]:
            if static is not None:  # a graph without the output layer returns no logits
                static.copy_(new)


def stand_in_capture(graph, run, device, owner):
    graph.run, graph.outputs = run, run()
    return graph.outputs


def test_graph_bookkeeping_runs_on_the_cpu_with_a_stand_in_graph(monkeypatch):
    """Chunked prefill (padded graphs of PREFILL_CHUNK positions) and EAGLE's catch-up graph, through stand-in
    graphs: the same results as the eager paths (the real graphs are tested on the GPU)."""
    from random_drafters import random_eagle

    import specviz.runners.static as static
    from specviz.proposers import eagle_tree

    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    monkeypatch.setattr(static, "capture_graph", stand_in_capture)
    monkeypatch.setattr(eagle_tree, "capture_graph", stand_in_capture)
    model = tiny_causal_lm(vocab_size=32, seed=7, layers=2, context=1024).model
    graphed, eager = StaticRunner(model, graphs=False, compile=False), StaticRunner(model, graphs=False, compile=False)
    graphed.use_graphs = True
    ids = torch.randint(0, 32, (340,))
    (a, ha), (b, hb) = graphed.forward(ids[:300]), eager.forward(ids[:300])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)
    graphed.rollback(0)
    none, hn = graphed.forward(ids[:300], logits_for="none")  # a prefill whose logits nobody reads: no output layer
    assert none is None and (static.LONG_PREFILL_CHUNK, 512, "headless") in graphed.workspace.graphs
    torch.testing.assert_close(hn, hb, atol=1e-5, rtol=1e-5)
    for start in range(300, 340, 4):  # decoding after it sees none of the padding
        a, _ = graphed.forward(ids[start:start + 4])
        b, _ = eager.forward(ids[start:start + 4])
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (static.LONG_PREFILL_CHUNK, 512, False) in graphed.workspace.graphs  # 300 positions: one chunk of 512
    graphed.reset(), eager.reset()  # 600: 512 + 88 in a chunk of 256 (a shorter rest takes the shorter chunk)
    long_ids = torch.randint(0, 32, (600,))
    (a, ha), (b, hb) = graphed.forward(long_ids), eager.forward(long_ids)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)
    assert {(static.LONG_PREFILL_CHUNK, 512, False),
            (static.PREFILL_CHUNK, 1024, False)} <= set(graphed.workspace.graphs)
    graphed.reset(), eager.reset()
    graphed.forward(ids[:340]), eager.forward(ids[:340])  # back to where the tree below starts
    # a tree of 6 nodes (padded to 8 in its graph), then its path 0, 1, 3, 5 kept: as if the path had been fed
    parents, path = [-1, 0, 0, 1, -1, 3], [0, 1, 3, 5]
    tree_ids = torch.randint(0, 32, (7,))
    chain = StaticRunner(model, graphs=False, compile=False)
    chain.forward(torch.cat([ids[:300], ids[300:340]]))
    cached = graphed.length
    (a, _), (b, _) = graphed.forward(tree_ids, parents=parents), eager.forward(tree_ids, parents=parents)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert (8, 512, True) in graphed.workspace.graphs
    graphed.keep_nodes(cached + 1, [cached + 1 + node for node in path])
    chain.forward(tree_ids[[0] + [node + 1 for node in path]])
    torch.testing.assert_close(graphed.workspace.keys[:, :, :graphed.length],
                               chain.workspace.keys[:, :, :chain.length], atol=1e-5, rtol=1e-5)
    a, _ = graphed.forward(ids[:3])
    b, _ = chain.forward(ids[:3])
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)

    target = tiny_causal_lm(vocab_size=16)
    drafter = random_eagle(LoadedModel(name="tiny", model=target.model, tokenizer=None, device=torch.device("cpu"),
                                       dtype=torch.float32), seed=6)
    features = torch.randn(150, drafter.net.config.hidden_size)
    token_ids = torch.randint(0, 16, (150,))
    caught_up, fed = eagle_tree.TreeDrafting(drafter, 512, 5), eagle_tree.TreeDrafting(drafter, 512, 5)
    caught_up.use_graphs = True
    caught_up.catch_up(features[:3], token_ids[:3])
    caught_up.catch_up(features[3:149], token_ids[3:149])  # three replays of one graph, the last part padding
    fed.prefill(features[:149], token_ids[:149])
    torch.testing.assert_close(caught_up.space.keys[:, :, :149], fed.space.keys[:, :, :149], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(caught_up.space.values[:, :, :149], fed.space.values[:, :, :149], atol=1e-5, rtol=1e-4)
    monkeypatch.setattr(eagle_tree, "_compile_failed", True)  # no torch.compile on this stand-in
    assert caught_up.step(features[149:], token_ids[149:], 4, 8, 20) == fed.step(features[149:], token_ids[149:], 4, 8,
                                                                                 20)
    caught_up.release(), fed.release()


def shapes_compiled(shapes: int) -> int:
    """How many of `shapes` input sizes a static torch.compile compiles, under dynamo's present recompile limit
    (past it, dynamo runs the function eagerly without a word)."""
    compiled = []

    def counting(graph, example_inputs):
        compiled.append(graph)
        return graph.forward

    def step(x):
        return x * 2 + 1

    torch._dynamo.reset()
    fn = torch.compile(step, backend=counting, dynamic=False)
    for n in range(1, shapes + 1):
        assert torch.equal(fn(torch.ones(n)), torch.full((n,), 3.0))
    torch._dynamo.reset()
    return len(compiled)


def test_a_static_device_function_compiles_every_shape_a_sampled_bench_meets():
    from specviz.runners import graphs

    shapes = 12  # two draft lengths over several attention spans: past dynamo's default of 8
    graphs.compiled_static(lambda x: x)
    assert shapes_compiled(shapes) == shapes
    with torch._dynamo.config.patch(**{limit_name(): 8}):  # the control: dynamo's default drops to eager
        assert shapes_compiled(shapes) == 8


def limit_name() -> str:
    return "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
