"""The fast path: a Llama-family forward over a static KV cache written by position (gpt-fast's design).

Why: with transformers' eager forward a small model's step on a GPU costs the same whatever the number of
positions (docs/fast-path.md): Python and kernel launches, not arithmetic. Here

- the KV cache is preallocated (static_cache.py); a forward writes its tokens' keys and values at their
  positions and attends over the positions up to its own, so rolling back is setting `length` (free);
- the decoder runs as a plain function of tensors: fused q/k/v and gate/up projections, no cache objects,
  no mask factories, so that a forward is few kernels;
- on a CUDA GPU each (positions fed, attention span) shape is captured once as a CUDA graph and replayed,
  optionally over torch.compile'd layers (fewer, fused kernels);
- where graphs or compile are unavailable (CPU, ZeroGPU) the same function runs eagerly: same results;
- on a CPU in float32 the weight matrices are prepacked once for oneDNN: a forward of 1 to 9 positions then
  costs about the same (MKL's products repack the weights on every call), and a row's result does not
  depend on the rows beside it.

StaticRunner has CausalRunner's interface (forward, rollback, reset, length), so the engine and every
drafter use it unchanged; make_runner() picks it for every model it supports and CausalRunner otherwise.
"""
from __future__ import annotations

import statistics
import warnings
import weakref
from functools import partial

import torch
import torch.nn.functional as F

from . import gpu_attention
from . import exact as exact_mode
from .clock import device_clock
from ..models.configs import head_dim, kv_heads, norm_eps
from ..options import EngineOptions
from .causal import CausalRunner, check_feature_layers, layer_features
from .static_cache import StaticCache
from ..settings import MAX_GAMMA, MAX_TREE
from ..rule.tree import check_tree, depths as tree_depths, unpack_visibility, visibility_words
from .graphs import (MIN_SPAN, CapturedGraph, capture_graph, compiled_fn, graph_span, next_power_of_two,
    no_cudnn_attention, return_workspace, take_workspace)
from .llama import (attention_mask, decoder_layer, layer_weights, rms_norm, text_config, tree_attention_mask,
    triton_decoder_layer, unsupported_reason)
from .onednn import model_matrices, onednn_allowed, onednn_linear, parameter_bytes

MAX_GRAPH_POSITIONS = MAX_GAMMA + 1  # forwards over more positions (prefills) go through in chunks:
PREFILL_CHUNK = 256  # positions of one captured prefill forward (the last chunk of an input padded)
LONG_PREFILL_CHUNK = 512  # ... while more than PREFILL_CHUNK positions remain: long prompts prefill faster in
# larger chunks, short ones slower (docs/performance.md)
MAX_TREE_POSITIONS = MAX_TREE + 1  # a tree verify pass: the last accepted token and the tree


class StaticRunner(StaticCache):
    """Runs new tokens of one sequence (batch 1) through a Llama-family model over a static KV cache.

    Same contract as causal.CausalRunner: forward(ids [K]) appends K tokens and returns (logits [K or 1, V]
    float32, hidden [K, H]); rollback(length) keeps the first `length` tokens; the cache holds exactly the
    first `length` tokens of the sequence (positions past it hold stale values that no forward attends to).
    A runner serves one sequence at a time; its workspace goes back to the model's pool when the runner
    is garbage-collected or release() is called. graphs, compile, onednn, triton_attention and exact: None takes
    the switch from `options` (None: EngineOptions.from_environment()), a bool overrides it. exact: the exact
    mode (runners/exact.py) where it applies (exact_reason says where not); drafters' runners pass False.
    features: the layers whose outputs `hidden` holds instead of the final norm's (layer_features: what a drafter
    that reads several of the target's layers, DFlash's, is fed); None: the final norm's output."""

    def __init__(self, model: torch.nn.Module, graphs: bool | None = None, compile: bool | None = None,
                 onednn: bool | None = None, triton_attention: bool | None = None, exact: bool | None = None,
                 options: EngineOptions | None = None, features: tuple[int, ...] | None = None):
        options = options or EngineOptions.from_environment()
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"the fast path does not support this model: {reason}")
        config = text_config(model)
        decoder = model.get_decoder()
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.heads = config.num_attention_heads
        self.kv_heads, self.head_dim = kv_heads(config), head_dim(config)
        window = getattr(config, "sliding_window", None)
        use_window = getattr(config, "use_sliding_window", True)  # qwen2 keeps the field but switches it off
        self.window = int(window) if window and use_window else None
        self.context_length = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self.layers = [layer_weights(layer) for layer in decoder.layers]
        self.features = check_feature_layers(features, len(self.layers))
        self.embed = decoder.embed_tokens.weight.detach()
        norm = decoder.norm
        self.final_norm = norm.weight.detach()
        self.final_eps = norm_eps(norm)
        head = model.get_output_embeddings()
        self.head = head.weight.detach()
        self.head_bias = None if getattr(head, "bias", None) is None else head.bias.detach()
        self.rotary = decoder.rotary_emb
        cuda = self.device.type == "cuda"
        self.use_graphs = cuda and (options.graphs if graphs is None else graphs)
        self.use_onednn = (options.onednn and onednn_allowed(self.device, self.dtype, parameter_bytes(model))
                           if onednn is None else onednn)
        self.use_compile = (cuda and options.compile and not _compile_failed) if compile is None else compile
        self.use_compile = self.use_compile and not self.use_onednn  # compile traces F.linear, not prepacked weights
        self.layer_tensors, self.head_matrix, self._linear = model_matrices(decoder, self.layers, head,
                                                                            self.use_onednn)
        # the layer as eager forwards run it (prefills, CPU); _layer_fn below: as graphs capture it
        self._eager_layer_fn = partial(decoder_layer, linear=onednn_linear) if self.use_onednn else decoder_layer
        # gpu_attention's kernel in captured graphs only: their shapes are fixed, so its Triton code compiles
        # while they are captured; eager forwards of new lengths would compile new specialisations mid-run
        self.use_triton_attention = self.use_graphs and (
            options.triton_attention and gpu_attention.supported(self.device, self.dtype, self.head_dim)
            if triton_attention is None else triton_attention)
        self._layer_fn = self._captured_layer_fn(self.use_compile)
        wanted = options.exact if exact is None else exact
        self.exact_reason = self._exact_reason() if wanted else "the exact mode is off"
        self.exact_width = exact_mode.WIDTH if self.exact_reason is None else 0  # 0: the usual forward
        # one pool per (layers, head, dtype, options): an early-exit cut and the full model differ
        key = (len(self.layers), self.head.data_ptr(), self.dtype, self.use_graphs, self.use_compile,
               self.use_triton_attention, self.exact_width, self.features)
        first = decoder.layers[0]
        self.workspace = take_workspace(first, key, self.device, self.dtype)
        self._finalizer = weakref.finalize(self, return_workspace, weakref.ref(first), key, self.workspace)
        self.length = 0

    def _captured_layer_fn(self, compiled: bool):
        """The layer as graphs capture it (and as eager CUDA forwards run it where graphs are off)."""
        if self.use_triton_attention:
            return partial(triton_decoder_layer, compiled=compiled)
        return compiled_fn(decoder_layer) if compiled else self._eager_layer_fn

    def _exact_reason(self) -> str | None:
        """Why the exact mode cannot run here (None when it can): it needs gpu_attention's kernels."""
        if self.device.type != "cuda":
            return ("the exact mode is for CUDA GPUs (on a CPU in float32 a row's result already does not depend on "
                    "the rows beside it)")
        if not gpu_attention.supported(self.device, self.dtype, self.head_dim):
            return "the exact mode needs Triton and a power-of-two head size of 16 to 256"
        if not gpu_attention.path_supported(self.heads, self.kv_heads):
            return f"the exact mode serves at most {gpu_attention.BLOCK_M} query heads a key-value head"
        return None

    @property
    def exact(self) -> bool:
        """Whether forwards of up to exact_width positions run in the exact mode."""
        return self.exact_width > 0

    def release(self) -> None:
        """Give the workspace back to the pool now (the engine calls this when a run ends); the runner
        cannot be used afterwards."""
        self._finalizer()
        self.workspace = None

    # forward -----------------------------------------------------------------------------------------
    def decode(self, ids: torch.Tensor, start: torch.Tensor, span: int, last_only: bool,
                depths: torch.Tensor | None = None, visible: torch.Tensor | None = None, compiled: bool = True,
                float_logits: bool = True, with_logits: bool = True):
        """The whole forward as tensor operations (what a graph captures). start [1]: first position. For a
        tree, depths [K] (0 for the root) and visible, the [K, K] visibility packed (tree.visibility_words) or
        as a bool matrix (the device loop's): token i sits at position start + depths[i] but is written at slot
        start + i, and attends to what visible allows among the new ones. compiled=False runs the layers
        uncompiled: where graphs are on, compiled code is only traced for captured shapes, and a forward outside
        them (a prefill, of any length) runs plain kernels. float_logits=False leaves the logits in the model's
        dtype (an argmax needs no float32 copy); with_logits=False skips the output layer (logits None: a
        prefill's)."""
        space = self.workspace
        count = ids.shape[0]
        if 0 < count <= self.exact_width:
            return self._decode_exact(ids, start, span, last_only, depths, visible, float_logits, with_logits)
        positions = start + torch.arange(count, device=ids.device)  # the cache slots written
        x = F.embedding(ids, self.embed)
        rope_positions = positions if depths is None else start + depths
        cos, sin = space.cos[rope_positions], space.sin[rope_positions]
        if visible is None:
            mask = attention_mask(positions, span, self.window)
        else:
            if visible.dtype != torch.bool:  # packed words (a host-built tree's); the device loop's is a matrix
                visible = unpack_visibility(visible, count)
            mask = tree_attention_mask(start, visible, span)
        layer_fn = self._layer_fn if compiled else self._eager_layer_fn
        pending = torch.zeros_like(x)  # each layer's MLP output, added by the next layer (decoder_layer)
        outputs = []  # the outputs of the feature layers
        for i, layer in enumerate(self.layers):
            # the cache sliced to the span here, not inside the compiled layer: traced first with the span equal
            # to the capacity, torch.compile takes them for one size and fails on every shorter span after
            x, pending = layer_fn(x, pending, self.layer_tensors[i], layer.eps, space.keys[i, :, :span],
                                  space.values[i, :, :span], cos, sin, positions, mask, self.heads, self.kv_heads,
                                  self.head_dim)
            if self.features and i in self.features:
                outputs.append(x + pending)
        hidden = rms_norm(x + pending, self.final_norm, self.final_eps)
        logits_input = hidden
        if self.features:
            hidden = layer_features(outputs, self.features)
        if not with_logits:
            return None, hidden
        logits = self._linear(logits_input[-1:] if last_only else logits_input, self.head_matrix, self.head_bias)
        return (logits.float() if float_logits else logits), hidden

    def _decode_exact(self, ids, start, span, last_only, depths, visible, float_logits, with_logits):
        """decode() in the exact mode (runners/exact.py): exact_width rows through every layer, the real ones
        first; attention and the cache over the real ones only. Compiled wherever compile is on, captured or
        not, so that every such forward runs the same kernels."""
        space = self.workspace
        count, width = ids.shape[0], self.exact_width
        slots = start + torch.arange(count, device=ids.device)
        if depths is None:
            depths = torch.arange(count, device=ids.device)
            paths = exact_mode.chain_paths(count, ids.device)
        else:
            if visible.dtype != torch.bool:
                visible = unpack_visibility(visible, count)
            paths = exact_mode.tree_paths(depths, visible)
        rope_positions = exact_mode.pad_rows(start + depths, width)  # padding rows: position 0, never read
        cos, sin = space.cos[rope_positions], space.sin[rope_positions]
        x = F.embedding(exact_mode.pad_rows(ids, width), self.embed)
        pending = torch.zeros_like(x)
        outputs = []
        for i, layer in enumerate(self.layers):
            x, pending = exact_mode.exact_decoder_layer(
                x, pending, self.layer_tensors[i], layer.eps, space.keys[i, :, :span], space.values[i, :, :span],
                cos, sin, slots, start, depths, paths, self.heads, self.kv_heads, self.head_dim, self.use_compile)
            if self.features and i in self.features:
                outputs.append((x + pending)[:count])
        hidden = rms_norm(x + pending, self.final_norm, self.final_eps)
        logits_input = hidden
        hidden = layer_features(outputs, self.features) if self.features else hidden[:count]
        if not with_logits:
            return None, hidden
        logits = self._linear(logits_input, self.head_matrix, self.head_bias)[:count]  # every row: one shape
        logits = logits[-1:] if last_only else logits
        return (logits.float() if float_logits else logits), hidden

    @torch.inference_mode()
    def forward(self, token_ids, logits_for: str = "all", parents: list[int] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append token_ids [K] (a tensor on any device, or a list) to the sequence. logits_for="last":
        only the last position's logits are needed (prefill, a drafter catching up), so the eager path
        computes the output layer there only; logits_for="none": no logits are wanted (the engine's prefill),
        so a prompt's chunks skip the output layer and None comes back (shorter inputs give the last position's).
        parents: token_ids are the root and a draft tree with these
        parents (tree.py); the cache then holds the tree's nodes in slots until keep_nodes()."""
        if parents is not None:  # built on the host from lists: a list is taken as it is
            return self._forward_tree(token_ids if isinstance(token_ids, list) else token_ids.tolist(), parents)
        if not torch.is_tensor(token_ids):
            token_ids = torch.tensor(token_ids, dtype=torch.long)
        return self._forward_chain(token_ids, logits_for)

    def _forward_chain(self, token_ids: torch.Tensor, logits_for: str):
        count = int(token_ids.shape[0])
        end = self.length + count
        last_only = logits_for in ("last", "none")
        if self.use_graphs and count > MAX_GRAPH_POSITIONS:
            return self._forward_in_chunks(token_ids, logits_for)
        if self.use_graphs:
            span = graph_span(end, self.context_length)
            self.ensure_capacity(span)
            logits, hidden = self._replay(token_ids, span)
            if last_only:
                logits = logits[-1:]
        else:
            logits, hidden = self._forward_eager(token_ids, last_only)
        self.length = end
        return logits, hidden

    def _forward_eager(self, token_ids: torch.Tensor, last_only: bool):
        """The forward without a graph (compiled where compile is on and graphs are not). Leaves self.length."""
        end = self.length + int(token_ids.shape[0])
        self.ensure_capacity(end)
        start = torch.full((1,), self.length, dtype=torch.long, device=self.device)
        ids = token_ids.to(self.device)
        compiled = self.use_compile and not self.use_graphs
        try:
            with no_cudnn_attention():
                return self.decode(ids, start, end, last_only, compiled=compiled)
        except Exception as error:  # compile is an optimisation: never fail a run over it
            if not compiled:
                raise
            self._fall_back_to_eager(error)
            with no_cudnn_attention():
                return self.decode(ids, start, end, last_only, compiled=False)

    def _forward_in_chunks(self, token_ids: torch.Tensor, logits_for: str):
        """A long input (a prompt) through captured graphs of LONG_PREFILL_CHUNK positions while more than
        PREFILL_CHUNK remain (and fit in the context), then of PREFILL_CHUNK, the last chunk padded:
        eagerly, a forward is hundreds of kernel launches from Python whatever the prompt's length, where a replay
        is one (docs/fast-path.md). The padding's keys and values land in slots past the input, where
        no token looks before its own forward has overwritten them (as with a padded draft tree). With
        logits_for="none" the chunks' graphs have no output layer (its product for every row, their float32
        copy and its clone: work nobody reads)."""
        last_only, head = logits_for != "all", logits_for != "none"
        logits, hidden = [], []
        begin, total = 0, int(token_ids.shape[0])
        while begin < total:
            size = LONG_PREFILL_CHUNK if (total - begin > PREFILL_CHUNK and
                                          self.length + LONG_PREFILL_CHUNK <= self.context_length) else PREFILL_CHUNK
            chunk = token_ids[begin:begin + size]
            real = int(chunk.shape[0])
            if self.length + size > self.context_length:  # no room for the padding: the rest eagerly
                rest = token_ids[begin:]
                chunk_logits, chunk_hidden = self._forward_eager(rest, last_only)
                self.length += int(rest.shape[0])
                logits.append(chunk_logits)
                hidden.append(chunk_hidden)
                break
            padded = torch.cat([chunk, chunk.new_zeros(size - real)])  # where the ids are: no host trip
            span = graph_span(self.length + size, self.context_length)
            self.ensure_capacity(span)
            chunk_logits, chunk_hidden = self._replay(padded, span, head=head)
            self.length += real
            begin += real
            if head:
                logits.append(chunk_logits[real - 1:real] if last_only else chunk_logits[:real])
            hidden.append(chunk_hidden[:real])
        if not head:
            return None, torch.cat(hidden)
        return (logits[-1] if last_only else torch.cat(logits)), torch.cat(hidden)

    def _forward_tree(self, ids: list[int], parents: list[int]):
        if not self.supports_tree:
            raise ValueError("this model uses a sliding attention window: draft trees are not supported")
        check_tree(ids[1:], parents)
        count = len(ids)
        if count != len(parents) + 1:
            raise ValueError(f"a tree of {len(parents)} nodes needs {len(parents) + 1} token ids (the root first)")
        if count > MAX_TREE_POSITIONS:
            raise ValueError(f"a tree of {count - 1} nodes is more than {MAX_TREE}")
        graphed = self.use_graphs and self.length + next_power_of_two(count) <= self.context_length
        # in a graph, padded to a power of two so that a few graphs serve every tree size: padding nodes are
        # children of the root that no real node sees, and their slots lie past what is kept
        pad = next_power_of_two(count) - count if graphed else 0
        all_parents = parents + [-1] * pad
        depths = [0, *tree_depths(all_parents)]
        visible = visibility_words(all_parents)
        if graphed:  # the graph's whole input (CapturedGraph's layout) as one host tensor: one copy
            inputs = torch.cat([torch.tensor(ids + [0] * pad + [self.length] + depths, dtype=torch.long), visible])
            span = graph_span(self.length + count + pad, self.context_length)
            self.ensure_capacity(span)
            logits, hidden = self._replay(inputs[:count + pad], span, tree_inputs=inputs)
            logits, hidden = logits[:count], hidden[:count]
        else:
            end = self.length + count
            self.ensure_capacity(end)
            start = torch.full((1,), self.length, dtype=torch.long, device=self.device)
            ids, depths = (torch.tensor(values, dtype=torch.long, device=self.device) for values in (ids, depths))
            visible = visible.to(self.device)
            with no_cudnn_attention():
                logits, hidden = self.decode(ids, start, end, False, depths, visible, compiled=False)
        self.length += count
        return logits, hidden

    def _fall_back_to_eager(self, error: Exception) -> None:
        global _compile_failed
        _compile_failed = True
        warnings.warn(f"specviz: torch.compile failed ({type(error).__name__}: {str(error)[:200]}); "
                      "the fast path goes on without it (CUDA graphs of the eager forward)")
        self.use_compile = False
        self._layer_fn = self._captured_layer_fn(False)

    def _replay(self, token_ids: torch.Tensor, span: int, tree_inputs: torch.Tensor | None = None, head: bool = True):
        """tree_inputs: a draft tree's whole graph input, laid out as CapturedGraph lays it out (the ids, the first
        position, the depths, the visibility words), on the host. head=False: a graph without the output layer
        (its logits None), kept apart as (positions, span, "headless")."""
        space = self.workspace
        tree = tree_inputs is not None
        key = (int(token_ids.shape[0]), span, tree if head else "headless")

        def fill(graph: CapturedGraph) -> None:
            if tree:
                graph.inputs.copy_(tree_inputs, non_blocking=True)
            elif token_ids.device.type == "cpu":  # a step's tokens: one copy
                graph.inputs.copy_(torch.cat([token_ids, torch.tensor([self.length])]), non_blocking=True)
            else:  # a prompt's chunk, already on the device
                graph.ids.copy_(token_ids, non_blocking=True)
                graph.start.fill_(self.length)

        graph = space.graphs.get(key)
        new = graph is None
        if new:
            graph = CapturedGraph(key[0], self.device, tree)
        fill(graph)
        if new:
            try:
                self._capture(graph, span, head)
            except Exception as error:  # compile is an optimisation: never fail a run over it
                if not self.use_compile:
                    raise
                self._fall_back_to_eager(error)
                graph = CapturedGraph(key[0], self.device, tree)
                fill(graph)
                self._capture(graph, span, head)
            space.graphs[key] = graph
        graph.graph.replay()
        return (None if graph.logits is None else graph.logits.clone()), graph.hidden.clone()

    def _capture(self, graph: CapturedGraph, span: int, head: bool = True) -> None:
        """Capture on the real inputs (writing the cache at the real positions is idempotent: the replay
        writes the same values)."""
        space = self.workspace
        graph.logits, graph.hidden = capture_graph(
            graph.graph, lambda: self.decode(graph.ids, graph.start, span, False, graph.depths, graph.visible,
                                              with_logits=head),
            self.device, space)

    @torch.inference_mode()
    def warm_up(self, max_positions: int, max_length: int, tree: int = 0) -> int:
        """Capture, before anything is timed, the graphs that runs of up to `max_length` tokens feeding up
        to `max_positions` positions a forward will replay (and compile, where compile is on), and with
        tree > 0 those of draft trees of up to `tree` nodes. Returns the number of graphs now held. The
        cache is left empty (length 0)."""
        if not self.use_graphs:
            return 0
        vocab = self.head.shape[0]
        last_span = graph_span(max_length, self.context_length)
        self.ensure_capacity(last_span)  # first: growing the cache later would drop the graphs
        span = min(MIN_SPAN, last_span)
        while span <= last_span:
            for count in range(1, min(max_positions, MAX_GRAPH_POSITIONS) + 1):
                if (count, span, False) not in self.workspace.graphs:
                    self.length = span - count  # so that the forward ends at `span`: this span's graph
                    self.forward(torch.randint(0, vocab, (count,)))
            for size in (PREFILL_CHUNK, LONG_PREFILL_CHUNK):  # a prompt's chunk ending in this span
                for flavour, logits_for in ((False, "all"), ("headless", "none")):
                    if (size, span, flavour) not in self.workspace.graphs and size <= span:
                        self.length = span - size
                        self.forward(torch.randint(0, vocab, (size,)), logits_for=logits_for)
            padded = 2
            while tree and self.supports_tree and padded <= next_power_of_two(tree + 1):
                if (padded, span, True) not in self.workspace.graphs and padded <= span:
                    self.length = span - padded
                    self.forward(torch.randint(0, vocab, (padded,)), parents=list(range(-1, padded - 2)))
                padded *= 2
            span = last_span if span < last_span < 2 * span else 2 * span
        self.length = 0
        return len(self.workspace.graphs)


_compile_failed = False


def make_runner(model: torch.nn.Module, fast: bool | None = None, options: EngineOptions | None = None,
                features: tuple[int, ...] | None = None, **overrides):
    """The fastest runner for `model`: StaticRunner where the model is supported, else CausalRunner. fast=None
    takes options.fast (EngineOptions; None: from the environment), where False forces transformers' forward;
    features: the layers whose outputs its forwards hand over as hidden states (either runner's); overrides go to
    StaticRunner (graphs=False, ...)."""
    options = options or EngineOptions.from_environment()
    if fast is None:
        fast = options.fast
    if fast and unsupported_reason(model) is None:
        try:
            return StaticRunner(model, options=options, features=features, **overrides)
        except Exception as error:  # never fail a run over the fast path: say so and take the slow one
            warnings.warn(f"specviz: fast path unavailable ({error}); using the transformers forward")
    return CausalRunner(model, features=features)


# The cost curve: forward time against the number of positions fed --------------------------------------

def cost_curve(model: torch.nn.Module, positions: list[int], context: int = 256, repeats: int = 10,
               runner=None) -> dict[int, float]:
    """Median milliseconds of one forward over K new positions after `context` cached tokens, for each K in
    `positions`, through the runner the engine would use (graphs and compile included on a GPU)."""
    runner = runner or make_runner(model)
    device = runner.device
    vocab = model.get_output_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (context,), generator=generator)
    runner.reset()
    runner.forward(prefix, logits_for="last")
    curve = {}
    for count in positions:
        ids = torch.randint(0, vocab, (count,), generator=generator)
        times = []
        for attempt in range(repeats + 2):  # the first two warm up (and capture a graph)
            begin = device_clock(device)
            runner.forward(ids)
            end = device_clock(device)
            if attempt >= 2:
                times.append((end - begin) * 1e3)
            runner.rollback(context)
        curve[count] = statistics.median(times)
    return curve
