"""The Llama-family decoder as plain functions of tensors: which models the fast path supports, their weights
fused (q/k/v and gate/up in one matrix each), the layer (norm, rotary, attention, MLP) and the attention masks
of chains and draft trees."""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import gpu_attention
from ..models.configs import norm_eps, scales_logits
from ..models.configs import text_config as config_text
from .graphs import compiled_fn

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # cos/sin depend on the position only


def text_config(model):
    """The text config of a model (configs.text_config of its config)."""
    return config_text(model.config)


def _rope_type(config) -> str:
    for key in ("rope_parameters", "rope_scaling"):
        value = getattr(config, key, None)
        if isinstance(value, dict):
            return value.get("rope_type", value.get("type", "default")) or "default"
    return "default"


def unsupported_reason(model) -> str | None:
    """Why the fast path cannot run this model (None when it can). Checked, not guessed: anything outside
    the plain Llama recipe (norms on q/k, soft-capping, dynamic RoPE, other activations) goes to CausalRunner."""
    config = text_config(model)
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
    if scales_logits(config):
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

        eps = norm_eps(layer.input_layernorm)
        weights = LayerWeights(
            qkv=qkv, qkv_bias=qkv_bias, o=attention.o_proj.weight.detach(), o_bias=plain(attention.o_proj, "bias"),
            gate_up=gate_up, gate_up_bias=gate_up_bias, down=mlp.down_proj.weight.detach(),
            down_bias=plain(mlp.down_proj, "bias"), input_norm=layer.input_layernorm.weight.detach(),
            post_attention_norm=layer.post_attention_layernorm.weight.detach(), eps=eps,
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
    result is added to x in the same compiled code becomes, in a captured graph, two kernels (cuBLAS copies x,
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


def triton_decoder_layer(x, pending, weights: tuple, eps: float, keys, values, cos, sin, positions, mask,
                         heads: int, kv_heads: int, head_dim: int, compiled: bool = True):
    """decoder_layer with gpu_attention's kernel in place of scaled_dot_product_attention (same arguments);
    the parts before and after it compiled (where compiled), the kernel and the output projection between them
    (the projection outside compiled code: see layer_mlp). The kernel also writes the tokens' keys and values
    into the cache (two kernels fewer a layer than index_copy_); `positions` ascend by one."""
    before = compiled_fn(layer_input) if compiled else layer_input
    after = compiled_fn(layer_mlp) if compiled else layer_mlp
    q, k, v, x = before(x, pending, weights, eps, cos, sin, heads, kv_heads, head_dim)
    attended = gpu_attention.launch(q, keys, values, mask, positions[-1:], k, v)  # last: the last slot written
    _, _, o_w, o_b = weights[:4]
    return after(x, F.linear(attended, o_w, o_b), weights, eps)
