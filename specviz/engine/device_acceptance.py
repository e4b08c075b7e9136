"""Acceptance on the device: pure tensor functions that decide a verify pass's verdict and append what it kept,
reading nothing back to the host (a CUDA graph cannot hold that), so that the device loop (device_loop.py)
captures them in its verify graph; on a CPU they run eagerly (the tests).

Greedy acceptance is verify.verify_greedy's (the output is plain greedy output); sampled acceptance follows the
same rule as verify.verify_sampled and tree.walk_sampled (the output has the target's distribution). A draft tree's
walk is tree_device's; keep_path hands the accepted path's cache slots to the caller, which moves their keys and
values next to the root's, as StaticRunner.keep_nodes does.

No tensor is indexed by a 0-d tensor (that reads the index back): gather / index_select instead; no tensor is
made from a host list.
"""
from __future__ import annotations

import torch

from ..rule.sampling import draw_with_noise, warp_with
from ..rule.tree_device import walk_tree, walk_tree_sampled
from ..rule.verify import accept_sampled, next_distribution


def accept_greedy(logits: torch.Tensor, draft: torch.Tensor, draft_length: torch.Tensor):
    """verify.verify_greedy on the device: logits [G + 1, V], draft [G] (its first draft_length real) ->
    (the target's choices [G + 1], accepted n [], the next token [])."""
    choices = logits.argmax(-1)
    gamma = draft.shape[0]
    agrees = (draft == choices[:gamma]) & (torch.arange(gamma, device=draft.device) < draft_length)
    accepted = agrees.int().cumprod(0).sum()
    return choices, accepted, choices.gather(0, accepted[None])[0]


def append_accepted(sequence, length, inputs, draft, accepted, next_token) -> None:
    """The accepted drafts [the first `accepted` of draft] and the next token appended to sequence (the first
    `length` [1] entries; its last entry is a sink for the slots not written), and the next pass's first token
    and position set (inputs = [the last token, the draft or tree, the first position])."""
    gamma = draft.shape[0]
    slots = torch.arange(gamma + 1, device=inputs.device)
    values = torch.where(slots < accepted, torch.cat([draft, draft.new_zeros(1)]), next_token)
    sink = sequence.shape[0] - 1
    sequence.index_copy_(0, torch.where(slots <= accepted, length + slots, sink), values)
    length.add_(accepted + 1)
    inputs[0].copy_(next_token)
    inputs[-1:].copy_(length - 1)


def advance(logits, sequence, length, inputs, draft_length, log) -> torch.Tensor:
    """After a verify pass over inputs = [the last token, the draft [G], the first position]: accept greedily and
    append (append_accepted). log [2G + 3]: the draft, the target's choices, the draft's length, accepted.
    Returns accepted []."""
    gamma = inputs.shape[0] - 2
    draft = inputs[1:gamma + 1]
    choices, accepted, next_token = accept_greedy(logits, draft, draft_length)
    log.copy_(torch.cat([draft, choices, draft_length[None], accepted[None]]))
    append_accepted(sequence, length, inputs, draft, accepted, next_token)
    return accepted


def advance_sampled(logits, q, temperature, top_k, top_p, filtered: bool, uniforms, noise, residual: bool,
                    sequence, length, inputs, draft_length, log, values) -> torch.Tensor:
    """advance() by speculative sampling: p, the target's warped distributions (sampling.warp_with); q [G, V]
    the drafter's (None: one-hot); uniforms [G] and noise [V] (Exp(1)) drawn by the caller. log as advance()'s,
    the target's choices -1 but the next token at row accepted; values [2G]: each draft's acceptance probability,
    then the uniforms. residual=False: the control that resamples from p (verify_sampled_without_residual).
    Returns accepted [], p [G + 1, V] and what the next token was drawn from [V] (what the app shows)."""
    gamma = inputs.shape[0] - 2
    draft = inputs[1:gamma + 1]
    p = warp_with(logits, temperature, top_k, top_p, filtered)
    accept, accepted = accept_sampled(p, q, draft, draft_length, uniforms)
    left = next_distribution(p, q, draft, draft_length, accepted, residual)
    next_token = draw_with_noise(left, noise)
    choices = torch.full((gamma + 1,), -1, dtype=torch.long, device=draft.device).index_copy(
        0, accepted[None], next_token[None])
    log.copy_(torch.cat([draft, choices, draft_length[None], accepted[None]]))
    values.copy_(torch.cat([accept, uniforms]))
    append_accepted(sequence, length, inputs, draft, accepted, next_token)
    return accepted, p, left


def advance_sampled_lean(*args) -> torch.Tensor:
    """advance_sampled() without what only the app's detail reads: compiled, p and the draw's distribution then
    need not be written out. Returns accepted []."""
    return advance_sampled(*args)[0]


def write_tree(nodes, inputs, depths, visible, parents, real) -> None:
    """A draft tree (tokens, parents, depths, real [B], ancestors [B, B]: DeviceLookup.draft_tree's) written into
    the verify pass's inputs: ids (the root first), depths [B + 1] and visibility [B + 1, B + 1] (the root sees
    itself, every node the root and its ancestors), and parents, real [B] (what advance_tree reads)."""
    node_tokens, node_parents, node_depths, node_real, ancestors = nodes
    inputs[1:node_tokens.shape[0] + 1].copy_(node_tokens)
    depths[1:].copy_(node_depths)
    visible[1:, 1:].copy_(ancestors)
    parents.copy_(node_parents)
    real.copy_(node_real)


def keep_path(sequence, length, inputs, tokens, path, accepted, next_token, gamma: int):
    """After a tree verify pass: the accepted path's tokens and the next token appended. Returns (the cache slots
    of the path's nodes, the slots they move to: right after the root's), for the caller to move their keys and
    values, and the path's rows of the pass (the root's, then its nodes') [gamma + 1]."""
    slots = torch.arange(gamma + 1, device=inputs.device)
    start = inputs[-1:]  # the root's slot
    behind = start + 1 + slots[:gamma]
    moved = torch.where(slots[:gamma] < accepted, start + 1 + path, behind)  # the rest stay: past what is kept
    rows = torch.cat([slots[:1], path + 1])
    append_accepted(sequence, length, inputs, tokens.gather(0, path), accepted, next_token)
    return moved, behind, rows


def advance_tree(logits, sequence, length, inputs, depths, visible, parents, real, log, gamma: int):
    """advance() after a tree verify pass over inputs = [the last token, the tree [B], the first position]: the
    tree walked greedily, its accepted path kept (keep_path). log [3B + 3]: the tree's tokens, parents, the
    target's choices, the number of real nodes, accepted. Returns keep_path's and accepted."""
    budget = parents.shape[0]
    tokens = inputs[1:budget + 1]
    choices, accepted, path, next_token = walk_tree(logits, tokens, parents, real, visible[1:, 1:], depths[1:], gamma)
    log.copy_(torch.cat([tokens, parents, choices, real.sum()[None], accepted[None]]))
    return (*keep_path(sequence, length, inputs, tokens, path, accepted, next_token, gamma), accepted)


def advance_tree_sampled(logits, temperature, top_k, top_p, filtered: bool, uniforms, noise, residual: bool,
                         sequence, length, inputs, depths, parents, real, log, values, gamma: int):
    """advance_tree() by the sampled walk (tree_device.walk_tree_sampled). log [3B + 3]: the tree's tokens,
    parents, then B + 1 entries: the path's nodes (its first min(gamma, B)) and last the next token; the number
    of real nodes, accepted. values [3B]: each node's acceptance probability, its token's probability at its
    parent's row, its uniform. residual=False: the control that draws from p where the walk stops. Returns
    keep_path's, accepted, p [B + 1, V] and what the next token was drawn from [V] (what the app shows)."""
    budget = parents.shape[0]
    tokens = inputs[1:budget + 1]
    p = warp_with(logits, temperature, top_k, top_p, filtered)
    accepted, path, left, accept = walk_tree_sampled(p, tokens, parents, real, depths[1:], uniforms, gamma)
    if not residual:
        left = p.index_select(0, torch.where(accepted > 0, path.gather(0, (accepted - 1).clamp(min=0)[None]) + 1, 0))[0]
    next_token = draw_with_noise(left, noise)
    walked = torch.cat([path, path.new_zeros(budget + 1)])[:budget + 1].index_copy(0, path.new_full((1,), budget),
                                                                                   next_token[None])
    log.copy_(torch.cat([tokens, parents, walked, real.sum()[None], accepted[None]]))
    p_of = p.index_select(0, parents + 1).gather(1, tokens[:, None])[:, 0]
    values.copy_(torch.cat([accept, p_of, uniforms]))
    return (*keep_path(sequence, length, inputs, tokens, path, accepted, next_token, gamma), accepted, p, left)


def advance_tree_sampled_lean(*args):
    """advance_tree_sampled() without what only the app's detail reads (as advance_sampled_lean): returns
    keep_path's and accepted."""
    return advance_tree_sampled(*args)[:4]
