"""The fast path: a Llama-family forward over a static KV cache written by position (gpt-fast's design).

Why: with transformers' eager forward a 135M model costs ~18 ms a step on an H200 whatever the number of
positions (docs/fast-path.md): Python and kernel launches, not arithmetic. Here

- the KV cache is one preallocated tensor per layer; a forward writes its tokens' keys and values at their
  positions and attends over the positions up to its own, so rolling back is setting `length` (free);
- the decoder runs as a plain function of tensors: fused q/k/v and gate/up projections, no cache objects,
  no mask factories, so that a forward is few kernels;
- on a CUDA GPU each (positions fed, attention span) shape is captured once as a CUDA graph and replayed,
  optionally over torch.compile'd layers (fewer, fused kernels);
- where graphs or compile are unavailable (CPU, ZeroGPU) the same function runs eagerly: same results;
- on a CPU in float32 the weight matrices are prepacked once for oneDNN: a forward of 1 to 9 positions then
  costs about the same (MKL's products repack the weights on every call: a 5-position forward cost 1.5
  one-position forwards), and a row's result does not depend on the rows beside it.

StaticRunner has CausalRunner's interface (forward, rollback, reset, length), so the engine and every
drafter use it unchanged; make_runner() picks it for every model it supports and CausalRunner otherwise.
"""
from __future__ import annotations

import os
import statistics
import threading
import warnings
import weakref
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import gpu_attention
from .clock import device_clock
from .settings import MAX_GAMMA, MAX_TREE
from .tree import WORD, check_tree, depths as tree_depths, unpack_visibility, visibility_words

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # cos/sin depend on the position only
MIN_SPAN = 128  # smallest attention span captured in a graph (positions are padded up to a power of two)
MAX_GRAPH_POSITIONS = MAX_GAMMA + 1  # forwards over more positions (prefills) go through in chunks:
PREFILL_CHUNK = 256  # positions of one captured prefill forward (the last chunk of an input padded)
LONG_PREFILL_CHUNK = 512  # ... while more than PREFILL_CHUNK positions remain: on an H100, prompts of 500-1,500
# tokens prefilled 25-30% faster in chunks of 512 than of 256, those of up to 200 a third slower
# (results/h100-device-loop/prefill-timing.txt)
MAX_TREE_POSITIONS = MAX_TREE + 1  # a tree verify pass: the last accepted token and the tree


def _text_config(model):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _rope_type(config) -> str:
    for key in ("rope_parameters", "rope_scaling"):
        value = getattr(config, key, None)
        if isinstance(value, dict):
            return value.get("rope_type", value.get("type", "default")) or "default"
    return "default"


def unsupported_reason(model) -> str | None:
    """Why the fast path cannot run this model (None when it can). Checked, not guessed: anything outside
    the plain Llama recipe (norms on q/k, soft-capping, dynamic RoPE, other activations) goes to CausalRunner."""
    config = _text_config(model)
    model_type = getattr(config, "model_type", None)
    devices = {p.device for p in model.parameters()}
    if len(devices) > 1 or any(d.type == "meta" for d in devices):
        return "the model is spread over several devices (a device map): its forward moves activations between them"
    if model_type not in SUPPORTED_MODEL_TYPES:
        return f"model type {model_type!r} is not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} is not silu"
    if _rope_type(config) not in STATIC_ROPE_TYPES:
        return f"RoPE type {_rope_type(config)!r} depends on the sequence length"
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return "logit soft-capping or scaling"
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if decoder is None or decoder is model or not isinstance(layers, torch.nn.ModuleList) or not len(layers):
        return "no decoder with a list of layers"
    if model.get_output_embeddings() is None or getattr(decoder, "rotary_emb", None) is None:
        return "no output layer or no rotary embedding module"
    attention = getattr(layers[0], "self_attn", None)
    mlp = getattr(layers[0], "mlp", None)
    needed = [(attention, ("q_proj", "k_proj", "v_proj", "o_proj")), (mlp, ("gate_proj", "up_proj", "down_proj")),
              (layers[0], ("input_layernorm", "post_attention_layernorm"))]
    for module, names in needed:
        if module is None or not all(hasattr(module, n) for n in names):
            return "layers are not Llama-shaped (q/k/v/o, gate/up/down projections, two RMSNorms)"
    if hasattr(attention, "q_norm") or hasattr(attention, "k_norm"):
        return "q/k norms"
    return None


# Weights ----------------------------------------------------------------------------------------------

@dataclass
class LayerWeights:
    qkv: torch.Tensor  # [(heads + 2 * kv_heads) * head_dim, H]: q, k and v projections in one matrix
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    gate_up: torch.Tensor  # [2 * I, H]: gate and up projections in one matrix
    gate_up_bias: torch.Tensor | None
    down: torch.Tensor
    down_bias: torch.Tensor | None
    input_norm: torch.Tensor
    post_attention_norm: torch.Tensor
    eps: float

    def tensors(self) -> tuple:
        return (self.qkv, self.qkv_bias, self.o, self.o_bias, self.gate_up, self.gate_up_bias, self.down,
                self.down_bias, self.input_norm, self.post_attention_norm)


def _fuse_rows(linears: list[torch.nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight matrix for several linear layers that read the same input. The layers' own parameters
    become views into it, so the model keeps working and every weight exists once."""
    with torch.no_grad():
        weight = torch.cat([m.weight.detach() for m in linears])
        has_bias = [m.bias is not None for m in linears]
        bias = torch.cat([m.bias.detach() for m in linears]) if all(has_bias) else None
        if any(has_bias) and bias is None:
            bias = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.weight.shape[0])
                              for m in linears])
        start = 0
        for m in linears:
            rows = m.weight.shape[0]
            m.weight.data = weight[start:start + rows]
            if m.bias is not None:
                m.bias.data = bias[start:start + rows]
            start += rows
    return weight, bias


_layer_weights: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # decoder layer -> LayerWeights


def layer_weights(layer: torch.nn.Module) -> LayerWeights:
    """Fused weights of one decoder layer, made once per layer (an early-exit cut shares the target's)."""
    weights = _layer_weights.get(layer)
    # made again when the model's parameters stopped being views into the fused matrices (moved, cast)
    if weights is None or layer.self_attn.q_proj.weight.data_ptr() != weights.qkv.data_ptr():
        attention, mlp = layer.self_attn, layer.mlp
        qkv, qkv_bias = _fuse_rows([attention.q_proj, attention.k_proj, attention.v_proj])
        gate_up, gate_up_bias = _fuse_rows([mlp.gate_proj, mlp.up_proj])

        def plain(module, name):
            value = getattr(module, name, None)
            return None if value is None else value.detach()

        norm = layer.input_layernorm
        eps = getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))
        weights = LayerWeights(
            qkv=qkv, qkv_bias=qkv_bias, o=attention.o_proj.weight.detach(), o_bias=plain(attention.o_proj, "bias"),
            gate_up=gate_up, gate_up_bias=gate_up_bias, down=mlp.down_proj.weight.detach(),
            down_bias=plain(mlp.down_proj, "bias"), input_norm=layer.input_layernorm.weight.detach(),
            post_attention_norm=layer.post_attention_layernorm.weight.detach(), eps=float(eps),
        )
        _layer_weights[layer] = weights
    return weights


# The decoder as functions of tensors -------------------------------------------------------------------

def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """As transformers' LlamaRMSNorm: normalise in float32, cast back, then scale."""
    normed = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return weight * normed.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def layer_input(x, pending, weights: tuple, eps: float, cos, sin, heads: int, kv_heads: int, head_dim: int,
                linear=F.linear):
    """A decoder layer up to attention, over K new tokens: x + pending [K, H] (the residual stream; pending:
    the layer before's MLP output, added here) -> (q [K, heads, head_dim] and k [K, kv_heads, head_dim] with
    RoPE applied, v [K, kv_heads, head_dim], x + pending). cos/sin [K, head_dim]; linear: F.linear, or
    onednn_linear for prepacked weights."""
    qkv_w, qkv_b, _, _, _, _, _, _, norm1, _ = weights
    count = x.shape[0]
    x = x + pending
    h = rms_norm(x, norm1, eps)
    qkv = linear(h, qkv_w, qkv_b).view(count, heads + 2 * kv_heads, head_dim)
    qk = qkv[:, : heads + kv_heads]
    qk = qk * cos[:, None] + rotate_half(qk) * sin[:, None]  # RoPE on q and k heads at once
    return qk[:, :heads], qk[:, heads:], qkv[:, heads + kv_heads:], x


def sdpa_attention(q, keys, values, mask, kv_heads: int):
    """q [K, heads, D] over keys/values [kv_heads, span, D] with mask [K, span] (True = may attend) ->
    [K, heads * D]. Grouped-query attention as one call: the `group` query heads that share a kv head
    become extra rows: q -> [kv_heads, group * K, D], row g * K + i is query head (kv, g) at token i."""
    count, heads, head_dim = q.shape
    group = heads // kv_heads
    q = q.reshape(count, kv_heads, group, head_dim).permute(1, 2, 0, 3).reshape(1, kv_heads, group * count, head_dim)
    rows_mask = mask.repeat(group, 1)[None, None]  # [1, 1, group * K, span]
    attended = F.scaled_dot_product_attention(q, keys[None], values[None], attn_mask=rows_mask)
    return attended.reshape(kv_heads, group, count, head_dim).permute(2, 0, 1, 3).reshape(count, heads * head_dim)


def layer_mlp(x, attention_out, weights: tuple, eps: float, linear=F.linear):
    """The rest of a decoder layer: x + attention_out (the output projection's result) [K, H] -> (that sum, the
    MLP's output, still to be added: the next layer's layer_input or the final norm adds it). A projection whose
    result is added to x in the same compiled code became, in a captured graph, two kernels (cuBLAS copies x,
    then adds the product); this way each product is one kernel, and each add is fused with the norm after it."""
    _, _, _, _, gate_up_w, gate_up_b, down_w, down_b, _, norm2 = weights
    x = x + attention_out
    gate, up = linear(rms_norm(x, norm2, eps), gate_up_w, gate_up_b).chunk(2, dim=-1)
    return x, linear(F.silu(gate) * up, down_w, down_b)


def decoder_layer(x, pending, weights: tuple, eps: float, keys, values, cos, sin, positions, mask,
                  heads: int, kv_heads: int, head_dim: int, linear=F.linear):
    """One Llama decoder layer over K new tokens. x + pending [K, H]: the residual stream (pending: the MLP output
    of the layer before, not yet added; zeros before the first); keys/values [kv_heads, span, head_dim] (this
    layer's cache up to the span attended, a view written in place at `positions` [K]); cos/sin [K, head_dim];
    mask [K, span] (True = may attend); linear: F.linear, or onednn_linear for prepacked weights. Returns
    (x, pending) for the next layer: the same sums in the same order as the usual layer."""
    q, k, v, x = layer_input(x, pending, weights, eps, cos, sin, heads, kv_heads, head_dim, linear)
    keys.index_copy_(1, positions, k.transpose(0, 1))
    values.index_copy_(1, positions, v.transpose(0, 1))
    _, _, o_w, o_b = weights[:4]
    return layer_mlp(x, linear(sdpa_attention(q, keys, values, mask, kv_heads), o_w, o_b), weights, eps, linear)


# Weights prepacked for oneDNN (CPU) ------------------------------------------------------------------------

# oneDNN picks the packed layout for a batch size; packed for 8 rows, a row's result is bitwise the same alone
# or among 2 to 33 others (packed for 1 it is not), and on this project's 2-core CPU the default model's
# matrices took 15 ms at 1 row, 15 at 5, 17 at 9 and 20 at 17, against 34, 46, 51 and 54 ms for F.linear.
PACK_ROWS_HINT = 8
MAX_PACKED_BYTES = 2 << 30  # packing copies the matrices: larger models keep F.linear and their memory


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear for a weight prepacked by pack_matrix: x [..., in] -> [..., out]."""
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # a view of a contiguous [K, in]: no copy
    return torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "").reshape(*x.shape[:-1], -1)


def pack_matrix(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS_HINT)


def parameter_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


_onednn_works: bool | None = None  # checked once per process


def onednn_allowed(device: torch.device, dtype: torch.dtype, weight_bytes: int) -> bool:
    """Prepacked oneDNN products on a CPU in float32, unless SPECVIZ_ONEDNN=0, the model is larger than
    MAX_PACKED_BYTES, or this PyTorch build lacks them or gets a different product (checked once)."""
    if device.type != "cpu" or dtype != torch.float32 or weight_bytes > MAX_PACKED_BYTES:
        return False
    if os.environ.get("SPECVIZ_ONEDNN", "1") == "0" or not torch.backends.mkldnn.is_available():
        return False
    global _onednn_works
    if _onednn_works is None:
        try:
            generator = torch.Generator().manual_seed(0)
            weight = torch.randn(96, 64, generator=generator)
            bias = torch.randn(96, generator=generator)
            x = torch.randn(5, 64, generator=generator)
            product = onednn_linear(x, pack_matrix(weight), bias)
            _onednn_works = torch.allclose(product, F.linear(x, weight, bias), rtol=1e-4, atol=1e-4)
        except Exception:  # an optimisation: a build without these operators keeps F.linear
            _onednn_works = False
    return _onednn_works


_packed: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> (dense data pointers, packed)


def packed_tensors(module: torch.nn.Module, dense: tuple) -> tuple:
    """`dense` with every matrix prepacked for oneDNN (vectors as they are), made once per module and
    again when its weights were replaced."""
    key = tuple(0 if t is None else t.data_ptr() for t in dense)
    entry = _packed.get(module)
    if entry is None or entry[0] != key:
        entry = (key, tuple(pack_matrix(t) if t is not None and t.dim() == 2 else t for t in dense))
        _packed[module] = entry
    return entry[1]


class PackedLinear(torch.nn.Module):
    """An inference-only nn.Linear whose weight is prepacked for oneDNN (same parameters, same state dict)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = pack_matrix(linear.weight.detach())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return onednn_linear(x, self.packed, self.bias)


def pack_linears(module: torch.nn.Module) -> int:
    """Swap every nn.Linear of an inference-only module (a trained drafter) for a PackedLinear, where
    onednn_allowed. Returns how many were swapped."""
    parameter = next(module.parameters(), None)
    if parameter is None or not onednn_allowed(parameter.device, parameter.dtype, parameter_bytes(module)):
        return 0
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedLinear(child))
                swapped += 1
    return swapped


def attention_mask(positions: torch.Tensor, span: int, window: int | None) -> torch.Tensor:
    """[K, span]: token i may attend to cache positions j <= positions[i] (and within the sliding window)."""
    keys = torch.arange(span, device=positions.device)
    mask = keys[None, :] <= positions[:, None]
    if window:
        mask = mask & (keys[None, :] > positions[:, None] - window)
    return mask


def tree_attention_mask(start: torch.Tensor, visible: torch.Tensor, span: int) -> torch.Tensor:
    """[K, span] for K tree positions written at slots start .. start + K - 1: every cached slot before
    `start`, then the slots that visible [K, K] (bool, or 0/1) allows (the position's ancestors and itself)."""
    count = visible.shape[0]
    visible = visible != 0
    offset = torch.arange(span, device=visible.device) - start
    inside = (offset >= 0) & (offset < count)
    return (offset < 0)[None, :] | (inside[None, :] & visible[:, offset.clamp(0, count - 1)])


# Eager forwards (prefills, any length) avoid cuDNN's attention: it builds a plan for every new shape (tens of
# milliseconds in bfloat16 on an H100 or H200), so each new prompt length paid for plans. Captured graphs keep
# it: their shapes are fixed, and in decode it is the fastest (excluding it there made a bfloat16 step
# 1.3 -> 1.65 ms at ~300 cached tokens and 1.7 -> 3.2 ms at ~2,000 on an H200).
ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def no_cudnn_attention():
    return sdpa_kernel(ATTENTION_BACKENDS)


def _next_power_of_two(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def compile_allowed() -> bool:
    """torch.compile is used on CUDA unless SPECVIZ_COMPILE=0 or on ZeroGPU, which does not support it."""
    if os.environ.get("SPECVIZ_COMPILE", "1") == "0" or os.environ.get("SPACES_ZERO_GPU"):
        return False
    return True


def graphs_allowed() -> bool:
    """CUDA graphs are used on CUDA unless SPECVIZ_GRAPHS=0 or on ZeroGPU, which lends the GPU per call: a
    graph holds raw device addresses, which need not survive from one call to the next."""
    return os.environ.get("SPECVIZ_GRAPHS", "1") != "0" and not os.environ.get("SPACES_ZERO_GPU")


class _Graph:
    """One captured forward: static inputs (token ids, first position; a tree's depths and visibility),
    static outputs. The inputs are views of one tensor, filled by one copy from the host."""

    def __init__(self, count: int, device: torch.device, tree: bool = False):
        words = count * -(-count // WORD)  # the visibility's rows packed in 64-bit words (tree.visibility_words)
        size = count + 1 + (count + words if tree else 0)
        self.inputs = torch.zeros(size, dtype=torch.long, device=device)
        self.ids, self.start = self.inputs[:count], self.inputs[count:count + 1]
        self.depths = self.inputs[count + 1:2 * count + 1] if tree else None
        self.visible = self.inputs[2 * count + 1:] if tree else None
        self.graph = torch.cuda.CUDAGraph()
        self.logits: torch.Tensor | None = None
        self.hidden: torch.Tensor | None = None


class Workspace:
    """What a runner needs beyond the weights and keeps between runs: the KV cache, the RoPE tables and the
    captured graphs (which point at both). Runners borrow one from a pool per model (take_workspace), so
    that graphs are captured once per model and shape, not once per run."""

    def __init__(self, device: torch.device, dtype: torch.dtype):
        self.device, self.dtype = device, dtype
        self.capacity = 0
        self.keys_values = self.keys = self.values = self.cos = self.sin = None  # keys, values: views of the first
        self.graphs: dict[tuple[int, int, bool], _Graph] = {}  # (positions, span, tree) -> graph
        self.pool = None  # the CUDA graphs' shared memory pool


_workspaces: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # first decoder layer -> {key: [free]}
_workspaces_lock = threading.Lock()


def take_workspace(first_layer: torch.nn.Module, key: tuple, device, dtype) -> Workspace:
    with _workspaces_lock:
        free = _workspaces.setdefault(first_layer, {}).setdefault(key, [])
        return free.pop() if free else Workspace(device, dtype)


def return_workspace(first_layer_ref, key: tuple, workspace: Workspace) -> None:
    first_layer = first_layer_ref()
    if first_layer is None:
        return
    with _workspaces_lock:
        _workspaces.setdefault(first_layer, {}).setdefault(key, []).append(workspace)


class StaticRunner:
    """Runs new tokens of one sequence (batch 1) through a Llama-family model over a static KV cache.

    Same contract as runner.CausalRunner: forward(ids [K]) appends K tokens and returns (logits [K or 1, V]
    float32, hidden [K, H]); rollback(length) keeps the first `length` tokens; the cache holds exactly the
    first `length` tokens of the sequence (positions past it hold stale values that no forward attends to).
    A runner serves one sequence at a time; its workspace goes back to the model's pool when the runner
    is garbage-collected or release() is called."""

    def __init__(self, model: torch.nn.Module, graphs: bool | None = None, compile: bool | None = None,
                 onednn: bool | None = None, triton_attention: bool | None = None):
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"the fast path does not support this model: {reason}")
        config = _text_config(model)
        decoder = model.get_decoder()
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        window = getattr(config, "sliding_window", None)
        use_window = getattr(config, "use_sliding_window", True)  # qwen2 keeps the field but switches it off
        self.window = int(window) if window and use_window else None
        self.context_length = int(getattr(config, "max_position_embeddings", 0) or 2048)
        self.layers = [layer_weights(layer) for layer in decoder.layers]
        self.embed = decoder.embed_tokens.weight.detach()
        norm = decoder.norm
        self.final_norm = norm.weight.detach()
        self.final_eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
        head = model.get_output_embeddings()
        self.head = head.weight.detach()
        self.head_bias = None if getattr(head, "bias", None) is None else head.bias.detach()
        self.rotary = decoder.rotary_emb
        cuda = self.device.type == "cuda"
        self.use_graphs = (cuda and graphs_allowed()) if graphs is None else (graphs and cuda)
        self.use_onednn = onednn_allowed(self.device, self.dtype, parameter_bytes(model)) if onednn is None else onednn
        self.use_compile = (cuda and compile_allowed() and not _compile_failed) if compile is None else compile
        self.use_compile = self.use_compile and not self.use_onednn  # compile traces F.linear, not prepacked weights
        if self.use_onednn:
            self.layer_tensors = [packed_tensors(module, weights.tensors())
                                  for module, weights in zip(decoder.layers, self.layers)]
            (self.head_matrix,) = packed_tensors(head, (self.head,))
            self._linear = onednn_linear
        else:
            self.layer_tensors = [weights.tensors() for weights in self.layers]
            self.head_matrix, self._linear = self.head, F.linear
        # the layer as eager forwards run it (prefills, CPU); _layer_fn below: as graphs capture it
        self._eager_layer_fn = partial(decoder_layer, linear=onednn_linear) if self.use_onednn else decoder_layer
        # gpu_attention's kernel in captured graphs only: their shapes are fixed, so its Triton code compiles
        # while they are captured; eager forwards of new lengths would compile new specialisations mid-run
        self.use_triton_attention = self.use_graphs and (
            gpu_attention.supported(self.device, self.dtype, self.head_dim) if triton_attention is None
            else triton_attention)
        self._layer_fn = self._captured_layer_fn(self.use_compile)
        # one pool per (layers, head, dtype, options): an early-exit cut and the full model differ
        key = (len(self.layers), self.head.data_ptr(), self.dtype, self.use_graphs, self.use_compile,
               self.use_triton_attention)
        first = decoder.layers[0]
        self.workspace = take_workspace(first, key, self.device, self.dtype)
        self._finalizer = weakref.finalize(self, return_workspace, weakref.ref(first), key, self.workspace)
        self.length = 0

    def _captured_layer_fn(self, compiled: bool):
        """The layer as graphs capture it (and as eager CUDA forwards run it where graphs are off)."""
        if self.use_triton_attention:
            return partial(triton_decoder_layer, compiled=compiled)
        return _compiled_fn(decoder_layer) if compiled else self._eager_layer_fn

    def release(self) -> None:
        """Give the workspace back to the pool now (the engine calls this when a run ends); the runner
        cannot be used afterwards."""
        self._finalizer()
        self.workspace = None

    # cache -------------------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        return self.workspace.capacity

    def reset(self) -> None:
        self.length = 0

    @property
    def supports_tree(self) -> bool:
        """Draft trees need every cached position visible; a sliding window is not implemented for them."""
        return self.window is None

    def rollback(self, length: int) -> None:
        """Keep only the first `length` tokens: nothing to copy, later forwards overwrite the rest."""
        if length > self.length:
            raise ValueError(f"cannot roll forward: cache holds {self.length} tokens, asked for {length}")
        self.length = length

    @torch.inference_mode()
    def keep_nodes(self, first_slot: int, node_slots: list[int]) -> None:
        """After a tree verify pass: keep the first `first_slot` tokens, then the accepted nodes (written at
        `node_slots`, ascending) moved down into the slots that follow: one gather and one copy over the keys
        and values of every layer."""
        count = len(node_slots)
        if node_slots != list(range(first_slot, first_slot + count)):
            source = torch.tensor(node_slots, dtype=torch.long).to(self.device, non_blocking=True)
            cache = self.workspace.keys_values  # keys and values at once; index_select copies first: the ranges
            cache.narrow(3, first_slot, count).copy_(cache.index_select(3, source))  # may overlap
        self.rollback(first_slot + count)

    def ensure_capacity(self, needed: int) -> None:
        """Grow the cache (and the RoPE tables) to hold `needed` positions. On a GPU it starts at 1024 and
        doubles, so that graphs, which point at the cache, are rarely captured again."""
        space = self.workspace
        if needed <= space.capacity:
            return
        if needed > self.context_length:
            raise ValueError(f"{needed} positions exceed the model's context of {self.context_length}")
        floor = 1024 if self.use_graphs else 64
        capacity = min(self.context_length, max(floor, _next_power_of_two(needed)))
        # keys and values in one tensor [2, layers, kv_heads, capacity, head_dim]: keep_nodes moves both at once
        keys_values = torch.zeros((2, len(self.layers), self.kv_heads, capacity, self.head_dim), dtype=self.dtype,
                                  device=self.device)
        if space.keys_values is not None:
            keys_values[:, :, :, : space.capacity].copy_(space.keys_values)
        space.keys_values, space.capacity = keys_values, capacity
        space.keys, space.values = keys_values[0], keys_values[1]
        positions = torch.arange(capacity, device=self.device)[None]
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            cos, sin = self.rotary(probe, positions)
        space.cos, space.sin = cos[0].to(self.dtype).contiguous(), sin[0].to(self.dtype).contiguous()
        # the graphs point at the old tensors; dropping them all also frees their memory pool, so the next
        # capture must start a new one (capturing into a freed pool fails inside PyTorch's allocator)
        space.graphs.clear()
        space.pool = None

    def layer_keys_values(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(keys, values) of every layer over the cached tokens, [1, kv_heads, length, head_dim] as
        transformers lays them out (for tests that compare with a fresh prefill)."""
        space = self.workspace
        return [(space.keys[i, :, : self.length][None], space.values[i, :, : self.length][None])
                for i in range(len(self.layers))]

    # forward -----------------------------------------------------------------------------------------
    def _decode(self, ids: torch.Tensor, start: torch.Tensor, span: int, last_only: bool,
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
        for i, layer in enumerate(self.layers):
            # the cache sliced to the span here, not inside the compiled layer: traced first with the span equal
            # to the capacity, torch.compile took them for one size and failed on every shorter span after
            x, pending = layer_fn(x, pending, self.layer_tensors[i], layer.eps, space.keys[i, :, :span],
                                  space.values[i, :, :span], cos, sin, positions, mask, self.heads, self.kv_heads,
                                  self.head_dim)
        hidden = rms_norm(x + pending, self.final_norm, self.final_eps)
        if not with_logits:
            return None, hidden
        logits = self._linear(hidden[-1:] if last_only else hidden, self.head_matrix, self.head_bias)
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
                return self._decode(ids, start, end, last_only, compiled=compiled)
        except Exception as error:  # compile is an optimisation: never fail a run over it
            if not compiled:
                raise
            self._fall_back_to_eager(error)
            with no_cudnn_attention():
                return self._decode(ids, start, end, last_only, compiled=False)

    def _forward_in_chunks(self, token_ids: torch.Tensor, logits_for: str):
        """A long input (a prompt) through captured graphs of LONG_PREFILL_CHUNK positions while more than
        PREFILL_CHUNK remain (and fit in the context), then of PREFILL_CHUNK, the last chunk padded:
        eagerly, a forward is some 600 kernel launches from Python, 15-30 ms on an H100 whatever the prompt's
        length, where a replay takes ~2 ms. The padding's keys and values land in slots past the input, where
        no token looks before its own forward has overwritten them (as with a padded draft tree). With
        logits_for="none" the chunks' graphs have no output layer (its product for every row, their float32
        copy and its clone: 0.1-0.7 ms a prompt on an H100)."""
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
        graphed = self.use_graphs and self.length + _next_power_of_two(count) <= self.context_length
        # in a graph, padded to a power of two so that a few graphs serve every tree size: padding nodes are
        # children of the root that no real node sees, and their slots lie past what is kept
        pad = _next_power_of_two(count) - count if graphed else 0
        all_parents = parents + [-1] * pad
        depths = [0, *tree_depths(all_parents)]
        visible = visibility_words(all_parents)
        if graphed:  # the graph's whole input (_Graph's layout) as one host tensor: one copy
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
                logits, hidden = self._decode(ids, start, end, False, depths, visible, compiled=False)
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
        """tree_inputs: a draft tree's whole graph input, laid out as _Graph lays it out (the ids, the first
        position, the depths, the visibility words), on the host. head=False: a graph without the output layer
        (its logits None), kept apart as (positions, span, "headless")."""
        space = self.workspace
        tree = tree_inputs is not None
        key = (int(token_ids.shape[0]), span, tree if head else "headless")

        def fill(graph: _Graph) -> None:
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
            graph = _Graph(key[0], self.device, tree)
        fill(graph)
        if new:
            try:
                self._capture(graph, span, head)
            except Exception as error:  # compile is an optimisation: never fail a run over it
                if not self.use_compile:
                    raise
                self._fall_back_to_eager(error)
                graph = _Graph(key[0], self.device, tree)
                fill(graph)
                self._capture(graph, span, head)
            space.graphs[key] = graph
        graph.graph.replay()
        return (None if graph.logits is None else graph.logits.clone()), graph.hidden.clone()

    def _capture(self, graph: _Graph, span: int, head: bool = True) -> None:
        """Capture on the real inputs (writing the cache at the real positions is idempotent: the replay
        writes the same values)."""
        space = self.workspace
        graph.logits, graph.hidden = capture_graph(
            graph.graph, lambda: self._decode(graph.ids, graph.start, span, False, graph.depths, graph.visible,
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
            while tree and self.supports_tree and padded <= _next_power_of_two(tree + 1):
                if (padded, span, True) not in self.workspace.graphs and padded <= span:
                    self.length = span - padded
                    self.forward(torch.randint(0, vocab, (padded,)), parents=list(range(-1, padded - 2)))
                padded *= 2
            span = last_span if span < last_span < 2 * span else 2 * span
        self.length = 0
        return len(self.workspace.graphs)


def capture_graph(graph: torch.cuda.CUDAGraph, run, device: torch.device, owner):
    """Run `run` twice on a side stream (lazy initialisation and allocations happen outside the capture; its
    writes must be idempotent), then capture it into `graph`, in the memory pool that the graphs of `owner`
    (a workspace: `.pool`, None until its first capture) share. Returns what the captured call returned: the
    graph's static outputs."""
    if owner.pool is None:
        owner.pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(2):
            run()
    torch.cuda.current_stream(device).wait_stream(stream)
    with torch.cuda.graph(graph, pool=owner.pool):
        outputs = run()
    return outputs


def graph_span(end: int, context_length: int) -> int:
    """The attention span a graph covers for a sequence of `end` tokens: a power of two >= MIN_SPAN (or
    the whole context), so that few graphs serve every length."""
    return min(context_length, max(MIN_SPAN, _next_power_of_two(end)))


_compiled: dict = {}
_compile_failed = False


def _compiled_fn(fn):
    """`fn` (a layer function) through torch.compile, compiled once per process: every layer of every model
    calls the same function with its own tensors, so it compiles twice per dtype: for K = 1 and for K > 1
    (sizes dynamic). Duck sizing is off while it compiles: otherwise a K that happens to equal a head count
    or the head size (3, 9, 64 for the default model) gets a specialised graph of its own, tens of seconds
    each."""
    if fn not in _compiled:
        compiled = torch.compile(fn, dynamic=True, fullgraph=True)

        def call(*args):
            with _no_duck_shapes():
                return compiled(*args)

        _compiled[fn] = call
    return _compiled[fn]


def triton_decoder_layer(x, pending, weights: tuple, eps: float, keys, values, cos, sin, positions, mask,
                         heads: int, kv_heads: int, head_dim: int, compiled: bool = True):
    """decoder_layer with gpu_attention's kernel in place of scaled_dot_product_attention (same arguments);
    the parts before and after it compiled (where compiled), the kernel and the output projection between them
    (the projection outside compiled code: see layer_mlp). The kernel also writes the tokens' keys and values
    into the cache (two kernels fewer a layer than index_copy_); `positions` ascend by one."""
    before = _compiled_fn(layer_input) if compiled else layer_input
    after = _compiled_fn(layer_mlp) if compiled else layer_mlp
    q, k, v, x = before(x, pending, weights, eps, cos, sin, heads, kv_heads, head_dim)
    attended = gpu_attention.launch(q, keys, values, mask, positions[-1:], k, v)  # last: the last slot written
    _, _, o_w, o_b = weights[:4]
    return after(x, F.linear(attended, o_w, o_b), weights, eps)


def _no_duck_shapes():
    import contextlib

    try:
        from torch.fx.experimental import _config
    except ImportError:
        return contextlib.nullcontext()
    if not hasattr(_config, "use_duck_shape"):  # another torch release: correct, only more compiles
        return contextlib.nullcontext()
    return _config.patch(use_duck_shape=False)


def make_runner(model: torch.nn.Module, fast: bool | None = None, **options):
    """The fastest runner for `model`: StaticRunner where the model is supported, else CausalRunner.
    fast=None reads the environment: SPECVIZ_FAST=0 forces transformers' forward (CausalRunner)."""
    from .runner import CausalRunner

    if fast is None:
        fast = os.environ.get("SPECVIZ_FAST", "1") != "0"
    if fast and unsupported_reason(model) is None:
        try:
            return StaticRunner(model, **options)
        except Exception as error:  # never fail a run over the fast path: say so and take the slow one
            warnings.warn(f"specviz: fast path unavailable ({error}); using the transformers forward")
    return CausalRunner(model)


def runners_of(proposer) -> list:
    """The runners a proposer drafts with (ModelDrafter.runner, an adaptive proposer's base's...), found
    among its attributes, so that they can be warmed up before timing whatever the drafting method."""
    found, stack, seen = [], [proposer], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        for value in vars(item).values() if hasattr(item, "__dict__") else ():
            if isinstance(value, StaticRunner):
                found.append(value)
            elif type(value).__module__.startswith("specviz.proposers") or hasattr(value, "propose"):
                stack.append(value)
    return found


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

