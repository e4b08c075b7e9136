"""Draft trees on the device: tree.py's weighted trie, heaviest line, greedy and sampled walks as tensor functions
without loops over nodes, which a CUDA graph can hold (the device loop, device_loop.py, replays them). They give
exactly what tree.py gives (tests/test_device_loop.py compares them on random candidates; the sampled walk, its
distribution)."""
from __future__ import annotations

import torch


def trie_groups(tokens: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor):
    """tokens, valid [M, G] (candidate m's run: the valid prefix of its row), weights [M] -> (group [M, M, G]:
    candidate j agrees with candidate i up to depth d; the weight of i's group at d [M, G]; its first member
    [M, G]). A group at depth d is a node of the candidates' trie."""
    same = (tokens[:, None, :] == tokens[None, :, :]) & valid[:, None, :] & valid[None, :, :]  # [i, j, d]
    group = same.int().cumprod(-1).bool()
    weight = (group * weights[None, :, None]).sum(1)
    first = group.int().argmax(1)  # argmax returns the first of equals
    return group, weight, first


def heaviest_line(tokens: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor,
                                                                                             torch.Tensor]:
    """tree.heaviest_line without a loop over depths. tokens, valid [M, G] (candidate m's run: the valid prefix
    of its row), weights [M] -> (the line [G], zeros past its end; its length [], a tensor).

    At each depth the host version keeps the group (same token there) of the candidates still on the line
    with the most weight, ties to the group seen first. Here, for every candidate i and depth d at once: its
    group (the candidates that agree with it up to d), the group's weight and first member, and whether its
    group wins among the groups of its parent (the candidates that agree with it up to d - 1); the line
    follows the candidates that win at every depth so far. Weights must add exactly (whole numbers)."""
    count = tokens.shape[0]
    group, weight, first = trie_groups(tokens, valid, weights)
    score = torch.where(valid, weight * count + (count - 1 - first), -1.0)  # heavier first, then earlier
    parent = torch.cat([valid[None, :, :1].expand(count, count, 1), group[:, :, :-1]], dim=-1)
    best_in_parent = torch.where(parent, score[None, :, :], -1.0).amax(1)
    on_line = (valid & (score == best_in_parent)).int().cumprod(-1).bool()  # [M, G]
    reached = on_line.any(0)
    line = tokens.gather(0, on_line.int().argmax(0)[None])[0]
    return torch.where(reached, line, 0), reached.sum()


def weighted_tree(tokens: torch.Tensor, valid: torch.Tensor, weights: torch.Tensor, budget: int):
    """tree.weighted_trie without a loop: tokens, valid [M, G] (candidate m's run: the valid prefix of its
    row), weights [M] (whole numbers) -> the `budget` heaviest nodes of the candidates' trie, best first (a
    parent before its children, siblings best first; past the real nodes, padding):
    (tokens [B], parents [B] (-1: the root), depths [B] (1: the root's children), real [B] (the first nodes),
    ancestors [B, B] (node b sees node a: a is b or above it; a padding node sees itself only)).

    A node is a candidate's prefix up to depth d, named by the first candidate that has it (as the host's trie
    makes it first). weighted_trie pops nodes best first by (weight, first candidate, depth): a child never
    comes before its parent in that order (no heavier; if as heavy, a later or the same first candidate, and
    deeper), so the `budget` first nodes in it form a tree, and its order is the host's order of siblings."""
    count, width = tokens.shape
    group, weight, first = trie_groups(tokens, valid, weights)
    members = torch.arange(count, device=tokens.device)
    named = valid & (first == members[:, None])  # node (i, d) is named by i
    flat = count * width
    place = torch.arange(flat, device=tokens.device).view(count, width)  # i * G + d: first candidate, then depth
    # one key that orders nodes as the host's heap pops them (exact in float64: the weights are whole numbers)
    key = torch.where(named, weight * flat + (flat - 1 - place), -1.0).reshape(-1)
    rank = (key[None, :] > key[:, None]).sum(1)  # nodes ahead of each
    chosen = named.reshape(-1) & (rank < budget)
    slots = torch.arange(budget, device=tokens.device)
    sink = torch.where(chosen, rank, budget)  # the nodes not chosen go to a slot past the end
    node = torch.zeros(budget + 1, dtype=torch.long, device=tokens.device).index_copy_(
        0, sink, torch.arange(flat, device=tokens.device))[:budget]
    real = slots < chosen.sum()
    row, depth = node // width, node % width
    above = (depth - 1).clamp(min=0)  # the parent of node (i, d): node (first[i, d - 1], d - 1)
    parent_node = first.reshape(-1).gather(0, row * width + above) * width + above
    parents = torch.where(real & (depth > 0), rank.gather(0, parent_node), -1)
    sees = (depth[None, :] <= depth[:, None]) & group.reshape(-1).gather(
        0, ((row[:, None] * count + row[None, :]) * width + depth[None, :]).reshape(-1)).view(budget, budget)
    both = real[:, None] & real[None, :]
    ancestors = torch.where(both, sees, slots[:, None] == slots[None, :])
    node_tokens = torch.where(real, tokens.reshape(-1).gather(0, node), 0)
    return node_tokens, parents, torch.where(real, depth + 1, 1), real, ancestors


def best_nodes(node_ids: torch.Tensor, node_parents: torch.Tensor, node_scores: torch.Tensor,
               node_depths: torch.Tensor, budget: int) -> torch.Tensor:
    """A model drafter's candidate nodes (ids, parents as indices into them, -1: the root; path log probability
    scores; depths [M]) -> its tree of the `budget` best, laid out by depth and, within a depth, best first
    (parents first): [2, B] long, the tree's token ids and parents (B = min(budget, M)). A child never scores
    above its parent, and a small depth term breaks ties, so the best nodes always form a tree."""
    key = node_scores.double() - node_depths.double() * 1e-6
    kept = key.topk(min(budget, key.shape[0])).indices
    kept = kept[torch.sort(-key[kept], stable=True).indices]
    kept = kept[torch.sort(node_depths[kept], stable=True).indices]
    index_of = torch.full((key.shape[0],), -1, dtype=torch.long, device=key.device)
    index_of[kept] = torch.arange(kept.shape[0], device=key.device)
    parents = node_parents[kept]
    parents = torch.where(parents < 0, parents, index_of[parents.clamp(min=0)])
    return torch.stack([node_ids[kept], parents])


def factored_tree(ids: torch.Tensor, scores: torch.Tensor, budget: int) -> torch.Tensor:
    """A draft tree from independent guesses at each depth (DFlash's block, whose positions are drafted at once:
    DDTree's tree): ids, scores [G, K], depth d + 1's K candidates and their log probabilities, best first. A
    path scores the sum of its tokens' log probabilities, and the tree is the `budget` best paths' nodes
    (best_nodes' layout: [2, B], token ids and parents). Exact with a beam of `budget` paths a depth: a path never
    scores above its prefix, so a prefix of one of the best paths is among the best of its depth."""
    depth, count = ids.shape
    device = ids.device
    width = min(budget, count)
    beam = scores[0, :width].float()  # the best paths' scores at the depth reached
    node_ids, node_scores = [ids[0, :width]], [beam]
    node_parents = [torch.full((width,), -1, dtype=torch.long, device=device)]
    node_depths = [torch.zeros(width, dtype=torch.long, device=device)]
    first = 0  # the index of the depth's first node among all nodes
    for d in range(1, depth):
        paths = (beam[:, None] + scores[d][None, :].float()).flatten()  # [width x K]: each path, each candidate
        beam, chosen = paths.topk(min(budget, paths.shape[0]))
        node_ids.append(ids[d].index_select(0, chosen % count))
        node_parents.append(first + chosen // count)
        first += width
        width = beam.shape[0]
        node_scores.append(beam)
        node_depths.append(torch.full((width,), d, dtype=torch.long, device=device))
    return best_nodes(torch.cat(node_ids), torch.cat(node_parents), torch.cat(node_scores), torch.cat(node_depths),
                      budget)


def candidates_tree(candidates, budget: int):
    """weighted_tree over sets of candidates (each: tokens, valid, weights), the first set's first."""
    return weighted_tree(*(torch.cat(parts) for parts in zip(*candidates)), budget)


def walk_tree(logits, tokens, parents, real, ancestors, depths, gamma: int):
    """tree.walk_greedy on the device: logits [B + 1, V] (row 0 the root's, row b + 1 node b's), the tree's
    tokens, parents, real [B], ancestors [B, B], depths [B] -> (the target's choices [B + 1], accepted n [], the
    accepted path: its node at each depth [gamma] (the first n real), the next token []). A node is on the
    path when it and every node above it are the target's choice after their parent (at most one child of a
    node can be: siblings differ)."""
    choices = logits.argmax(-1)
    agrees = real & (tokens == choices.gather(0, parents + 1))
    on_path = real & ~(ancestors & ~agrees[None, :]).any(-1)
    accepted = torch.where(on_path, depths, 0).amax()
    levels = torch.arange(1, gamma + 1, device=tokens.device)
    path = (on_path[None, :] & (depths[None, :] == levels[:, None])).int().argmax(-1)
    last_row = torch.where(accepted > 0, path.gather(0, (accepted - 1).clamp(min=0)[None])[0] + 1, 0)
    return choices, accepted, path, choices.gather(0, last_row[None])[0]


def tree_layout(tokens: torch.Tensor, parents: torch.Tensor, budget: int, depth: int):
    """A drafter's tree (tokens, parents [N], parents before children, N <= budget; a model drafter's) -> what
    weighted_tree gives: (tokens, parents, depths, real, ancestors) over `budget` nodes, padding past N. depth:
    the tree's greatest depth (its nodes' ancestors are found in that many steps)."""
    count = tokens.shape[0]
    pad = budget - count
    slots = torch.arange(budget, device=tokens.device)
    real = slots < count
    tokens = torch.cat([tokens, tokens.new_zeros(pad)])
    parents = torch.cat([parents, parents.new_full((pad,), -1)])
    ancestors = slots[:, None] == slots[None, :]
    node_depths = torch.ones(budget, dtype=torch.long, device=tokens.device)
    above = parents
    for _ in range(depth - 1):  # each step adds the nodes one level further up
        has = above >= 0
        ancestors = ancestors | (has[:, None] & (slots[None, :] == above.clamp(min=0)[:, None]))
        node_depths = node_depths + has
        above = torch.where(has, parents.gather(0, above.clamp(min=0)), -1)
    return tokens, parents, node_depths, real, ancestors


def walk_tree_sampled(probs, tokens, parents, real, depths, uniforms, gamma: int):
    """tree.walk_sampled on the device: probs [B + 1, V] (the target's warped distributions; row 0 the root's,
    row b + 1 node b's), the tree's tokens, parents, real, depths [B], uniforms [B] (node b's trial) -> (accepted
    n [], the path [gamma] (the first n real), the distribution the next token is drawn from [V], each node's
    acceptance probability [B]).

    A node's children are tried in order, each as a one-hot draft against what its earlier siblings left:
    child k is accepted with probability p(x_k) / (1 - p(x_1) - ... - p(x_(k-1))), the host's p with the tried
    tokens removed and renormalised (siblings hold distinct tokens); after every child is rejected, the next
    token is drawn from p without them. Each node is tried at most once, so one uniform a node serves."""
    budget = tokens.shape[0]
    slots = torch.arange(budget, device=tokens.device)
    p_of = probs.index_select(0, parents + 1).gather(1, tokens[:, None])[:, 0]  # each token at its parent's row
    mass = torch.where(real, p_of, 0.0)
    earlier = (parents[:, None] == parents[None, :]) & (slots[None, :] < slots[:, None])  # [b, its earlier sibling]
    left = 1.0 - (earlier * mass[None, :]).sum(1)
    accept = torch.where(left > 0, (p_of / left.clamp_min(1e-30)).clamp(max=1.0), 0.0)
    trial = real & (uniforms < accept)
    node = parents.new_full((), -1)
    accepted = torch.zeros((), dtype=torch.long, device=tokens.device)
    path = torch.zeros(gamma, dtype=torch.long, device=tokens.device)
    going = torch.ones((), dtype=torch.bool, device=tokens.device)
    for level in range(gamma):
        passed = trial & (parents == node)
        moved = going & passed.any()
        first = passed.int().argmax()  # the first accepted child in the drafter's order
        path[level] = torch.where(moved, first, path[level])
        accepted = accepted + moved
        node = torch.where(moved, first, node)
        going = moved
    row = probs.index_select(0, (node + 1)[None])[0]
    tried = real & (parents == node)  # where the walk ended: every child was tried and rejected (a leaf: none)
    vocab = row.shape[0]
    rest = torch.cat([row, row.new_zeros(1)]).scatter(0, torch.where(tried, tokens, vocab), 0.0)[:vocab]
    total = rest.sum()
    return accepted, path, torch.where(total > 0, rest / total.clamp_min(1e-30), row), accept
