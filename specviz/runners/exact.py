"""The exact mode of the target's forward: every position's arithmetic is the same whether it is computed alone
(plain decoding), as one of a verify pass's chain, or as a node of a draft tree (docs/exactness.md).

Why: a GPU picks its kernels' tilings and reduction orders by the shape of the work. A verify pass over K
positions and a decode step over one are different shapes, so in bfloat16 their logits differ in the last bits
and a near-tie between the top two tokens can flip: greedy speculative output then differs from plain greedy
output although the method is exact. Here

- every forward of up to WIDTH positions computes WIDTH rows (the real ones first, then padding that nothing
  reads): each linear layer, norm, rotary embedding and activation runs at one shape, so each row's
  reduction order is the same whatever the number of real rows and whichever row it is;
- attention is gpu_attention.launch_paths: each token reduces over its own keys, the cache's and then its
  path's (for a tree node, its ancestors in depth order), in fixed chunks of positions, so that a tree's
  accepted path is computed as a chain would be;
- the cache is written for the real rows only, with the keys and values those rows computed (by the
  attention kernel: no kernels of their own): what a verify pass writes for an accepted token is what plain
  decoding writes there;
- the layers' parts around attention are compiled for that one shape (static shapes: Inductor's kernels
  chosen for it, not for any number of rows).

Forwards of more positions (a prompt's prefill) take the usual path: plain and speculative runs prefill a
prompt the same way.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import gpu_attention
from .graphs import compiled_static
from .llama import layer_input, layer_mlp

WIDTH = 32  # rows of every exact forward: the widest verify pass covered (a chain of 31 drafts, a tree of 31 nodes)


def chain_paths(count: int, device) -> torch.Tensor:
    """[count, count]: a chain's paths, token i's d-th token being token d."""
    return torch.arange(count, device=device).expand(count, count).contiguous()


def tree_paths(depths: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """[K, K] long: paths[i, d] = the token at depth d among token i's ancestors and itself (visible [K, K]
    bool, row i True at those), 0 past token i's depth (never read). Tensor work only: it runs inside graphs."""
    count = depths.shape[0]
    levels = torch.arange(count, device=depths.device)
    at_depth = visible[:, None, :] & (depths[None, None, :] == levels[None, :, None])  # [token, depth, ancestor]
    return at_depth.to(torch.int32).argmax(-1).contiguous()


def exact_layer_input(*args):
    """runners.llama.layer_input under a name of its own: compiled with static shapes apart from the usual
    path's compile of layer_input (dynamic shapes), which shares that function's code."""
    return layer_input(*args)


def exact_layer_mlp(*args):
    """runners.llama.layer_mlp, likewise."""
    return layer_mlp(*args)


def pad_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """x [K, ...] with zero rows appended up to `rows`."""
    if x.shape[0] == rows:
        return x
    return torch.cat([x, x.new_zeros((rows - x.shape[0], *x.shape[1:]))])


def exact_decoder_layer(x, pending, weights: tuple, eps: float, keys, values, cos, sin, slots, start, depths,
                        paths, heads: int, kv_heads: int, head_dim: int, compiled: bool = True):
    """One decoder layer in the exact mode. x, pending, cos, sin: WIDTH rows (runners.llama.decoder_layer's
    meaning); slots [K]: the cache slots of the K real rows (start .. start + K - 1); start [1], depths [K],
    paths [K, K]: where each real token sits and its path (launch_paths). Returns (x, pending) of WIDTH rows."""
    before = compiled_static(exact_layer_input) if compiled else layer_input
    after = compiled_static(exact_layer_mlp) if compiled else layer_mlp
    q, k, v, x = before(x, pending, weights, eps, cos, sin, heads, kv_heads, head_dim)
    real = slots.shape[0]
    attended = gpu_attention.launch_paths(q[:real], keys, values, start, depths, paths, slots[-1:], k[:real],
                                          v[:real], rows=x.shape[0])  # the padding rows' results: never read
    _, _, o_w, o_b = weights[:4]
    return after(x, F.linear(attended, o_w, o_b), weights, eps)
