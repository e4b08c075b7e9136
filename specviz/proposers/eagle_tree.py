"""EAGLE-2's dynamic draft tree as fixed-shape tensor work, so that a whole tree step runs on the device
without a host round trip, and on a CUDA GPU as one captured graph.

Why: drafting a tree node by node on the host costs several verify passes' time a step (seven eager drafter
passes, each followed by a host sync to choose the next nodes; docs/performance.md has the figures). Here every
choice is a top-k on the device, and the drafter's keys and values live in a static cache written by slot:

- slots 0 .. prefix - 1 hold the positions computed from the target's own features (position i at slot i);
- a step first feeds the pending positions (the target's features of the tokens accepted since the last
  step), then expands the tree: at depth d the `width` best nodes so far are fed together at slots
  prefix + (d - 1) * width + row, each attending to the prefix, its ancestors' slots and itself; each keeps
  its `width` likeliest next tokens;
- the `budget` best nodes of all (by path log probability) form the tree, laid out by depth and, within a
  depth, best first (tree.py's layout: parents first).

The tree slots are scratch: the next step's pending positions overwrite them. Shapes are fixed by (gamma,
width, budget, rows fed, cache capacity), so one graph per such key serves every step.
"""
from __future__ import annotations

import threading
from typing import NamedTuple
import warnings

import torch

from ..runners import gpu_attention
from ..options import EngineOptions
from ..runners.graphs import capture_graph, no_cudnn_attention
from ..rule.tree_device import best_nodes
from .eagle_net import attend

MIN_CAPACITY = 512  # smallest drafter cache on a GPU (a power of two: few graphs serve every length)
CATCH_UP_ROWS = 64  # positions one replay of the catch-up graph feeds (a prompt, or steps drafted by others)
KERNEL_MIN_CAPACITY = 4096  # the same where gpu_attention's kernel attends (it reads no slot past the last written)


def attention_kernel_for(drafter, options: EngineOptions) -> bool:
    """Whether gpu_attention's kernel serves this drafter (switched on; CUDA, Triton, its head size)."""
    return options.triton_attention and gpu_attention.supported(drafter.parts.device, drafter.parts.dtype,
                                                                drafter.net.config.head_dim)


class CacheTensors(NamedTuple):
    """What drafting reads and writes of a workspace, passed as tensors (and a flag), not as the workspace: a
    compiled function guards on the objects it is given, so every new workspace would compile it again."""
    keys: torch.Tensor  # [layers, kv heads, capacity, head dim]
    values: torch.Tensor
    cos: torch.Tensor  # [capacity, head dim]
    sin: torch.Tensor
    attention_kernel: bool  # gpu_attention's kernel (CUDA), else scaled_dot_product_attention


class TreeWorkspace:
    """A static drafter cache ([layers, kv heads, capacity, head dim]), its RoPE tables, the graphs that point
    at them and their static inputs. One run uses one at a time; they are pooled per drafter."""

    def __init__(self, drafter, capacity: int, attention_kernel: bool):
        net, parts = drafter.net, drafter.parts
        config = net.config
        device, dtype = parts.device, parts.dtype
        shape = (len(net.layers), config.num_key_value_heads, capacity, config.head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        with torch.no_grad():
            cos, sin = parts.rotary(torch.arange(capacity, device=device))
        self.cos, self.sin = cos[0].to(dtype).contiguous(), sin[0].to(dtype).contiguous()
        self.capacity = capacity
        # in graphs on CUDA, gpu_attention's kernel: the span is the whole cache, which SDPA reads to the end
        self.attention_kernel = attention_kernel
        self.graphs: dict[tuple, "_TreeGraph"] = {}
        self.pool = None

    def tensors(self, captured: bool = False) -> CacheTensors:
        """captured: for a graph being captured, the only place gpu_attention's kernel runs (its shapes are
        fixed there; eager calls of new lengths would compile new Triton specialisations mid-run)."""
        return CacheTensors(self.keys, self.values, self.cos, self.sin, captured and self.attention_kernel)


class _TreeGraph:
    def __init__(self, rows: int, hidden: int, device, dtype):
        self.features = torch.zeros(rows, hidden, device=device, dtype=dtype)
        self.token_ids = torch.zeros(rows, dtype=torch.long, device=device)
        self.count = torch.ones(1, dtype=torch.long, device=device)
        self.start = torch.zeros(1, dtype=torch.long, device=device)
        self.graph = torch.cuda.CUDAGraph()
        self.out: torch.Tensor | None = None  # [2, budget]: token ids, parents


def feed(drafter, cache: CacheTensors, features, token_ids, slots, positions, mask):
    """Run the drafter over K inputs: features [K, F] (f_i: the target's, or the drafter's own [K, H]), token_ids
    [K] (x_{i+1}); their keys and values are written at cache `slots` [K]; rotary `positions` [K]; mask [K, span]
    (True = may attend). Returns [K, H]."""
    net, parts = drafter.net, drafter.parts
    x, embeds = net.start(features[None], parts.embed(token_ids)[None])  # [1, K, H]
    cos, sin = cache.cos[positions][None], cache.sin[positions][None]
    span = mask.shape[-1]
    for index, layer in enumerate(net.layers):
        q, k, v = layer.project(x, cos, sin, embeds)
        cache.keys[index].index_copy_(1, slots, k[0])
        cache.values[index].index_copy_(1, slots, v[0])
        keys, values = cache.keys[index][:, :span], cache.values[index][:, :span]
        if cache.attention_kernel:  # slots ascend: none is seen past the last one written
            x = layer.finish_rows(x,
                                  gpu_attention.attention(q[0].transpose(0, 1), keys, values, mask, slots[-1:])[None])
        else:
            x = layer.finish(x, attend(q, keys[None], values[None], mask))
    return x[0]


def draft_tree(drafter, cache: CacheTensors, features, token_ids, count, start, gamma: int, width: int,
               budget: int, span: int) -> torch.Tensor:
    """One tree step, tensors only (what a graph captures). features [R, H] and token_ids [R]: the pending
    positions start .. start + count - 1 (rows past `count` are padding: written past the prefix, seen by
    no one, overwritten). count, start: [1] long. span: cache slots attended (>= start + count + tree slots).
    Returns [2, B] long: the tree's token ids and parents (B = min(budget, candidate nodes))."""
    head = drafter.head
    device = features.device
    rows = features.shape[0]
    columns = torch.arange(span, device=device)
    slots = start + torch.arange(rows, device=device)
    out = feed(drafter, cache, features, token_ids, slots, slots, columns[None, :] <= slots[:, None])
    root_feature = out.index_select(0, count - 1)  # predicts the feature of the position after the prefix
    prefix = start + count

    tree_slots = (gamma - 1) * width
    nodes = width + (gamma - 1) * width * width
    node_ids = torch.zeros(nodes, dtype=torch.long, device=device)
    node_parents = torch.full((nodes,), -1, dtype=torch.long, device=device)
    node_scores = torch.zeros(nodes, dtype=torch.float32, device=device)
    node_depths = torch.zeros(nodes, dtype=torch.long, device=device)
    ids, scores = head.top_tokens(root_feature, width)  # [1, width]
    node_ids[:width], node_scores[:width] = ids[0], scores[0]

    frontier = torch.arange(width, device=device)  # candidates to expand (global node indices)
    frontier_features = root_feature.expand(width, -1)  # the feature fed beside each
    frontier_visible = torch.zeros(width, max(1, tree_slots), dtype=torch.bool, device=device)  # ancestors' slots
    offset = columns - prefix  # each column's tree slot (negative: the prefix)
    in_tree = (offset >= 0) & (offset < tree_slots)
    rows_index = torch.arange(width, device=device)
    slot_index = torch.arange(max(1, tree_slots), device=device)
    for depth in range(1, gamma):
        chosen = node_scores[frontier].topk(width).indices
        expand = frontier[chosen]
        own = (depth - 1) * width + rows_index  # the tree slots these nodes are written at
        visible = frontier_visible[chosen] | (slot_index[None, :] == own[:, None])
        mask = (offset < 0)[None, :] | (in_tree[None, :] & visible[:, offset.clamp(0, tree_slots - 1)])
        out = feed(drafter, cache, frontier_features[chosen], node_ids[expand], prefix + own,
                   (prefix - 1 + depth).expand(width), mask)
        ids, scores = head.top_tokens(out, width)  # [width, width]: each expanded node's children
        low = width + (depth - 1) * width * width
        high = low + width * width
        node_ids[low:high] = ids.flatten()
        node_parents[low:high] = expand[:, None].expand(width, width).reshape(-1)
        node_scores[low:high] = (node_scores[expand][:, None] + scores).flatten()
        node_depths[low:high] = depth
        frontier = torch.arange(low, high, device=device)
        frontier_features = out[:, None].expand(-1, width, -1).reshape(width * width, -1)  # each child's parent's
        frontier_visible = visible[:, None].expand(-1, width, -1).reshape(width * width, -1)

    return best_nodes(node_ids, node_parents, node_scores, node_depths, budget)


class TreeDrafting:
    """A run's tree drafting for one EAGLE drafter: a static cache taken from the drafter's pool, what has
    been fed into it, and the step itself (a graph replay on CUDA where graphs are allowed, else eager)."""

    def __init__(self, drafter, needed: int, max_rows: int, options: EngineOptions | None = None):
        options = options or EngineOptions.from_environment()
        self.drafter = drafter
        self.device = drafter.parts.device
        self.use_graphs = self.device.type == "cuda" and options.graphs
        self.use_compile = options.compile
        kernel = attention_kernel_for(drafter, options)
        self.max_rows = max_rows  # pending positions a graph feeds (gamma + 1: a step's accepted ones)
        floor = 64
        if self.use_graphs:  # with the kernel, a slot past the last one written costs nothing: one size serves
            floor = KERNEL_MIN_CAPACITY if kernel else MIN_CAPACITY  # nearly every run
        self.space = take_workspace(drafter, max(floor, 1 << (needed - 1).bit_length()), kernel)
        self.length = 0  # slots holding positions computed from the target's features

    def release(self) -> None:
        if self.space is not None:
            give_back_workspace(self.drafter, self.space)
            self.space = None

    @property
    def capacity(self) -> int:
        return self.space.capacity

    @torch.inference_mode()
    def catch_up(self, features: torch.Tensor, token_ids: torch.Tensor) -> None:
        """Feed positions length .. length + K - 1, no tree: a prompt's features, or those of steps that others
        drafted (adaptive's lookup and plain steps). With graphs, CATCH_UP_ROWS positions a replay of one
        captured graph: fed eagerly, every new count is new work for the allocator and kernels, more than a
        whole tree step."""
        if not self.use_graphs:
            return self.prefill(features, token_ids)
        for begin in range(0, features.shape[0], CATCH_UP_ROWS):
            self._replay_catch_up(features[begin:begin + CATCH_UP_ROWS], token_ids[begin:begin + CATCH_UP_ROWS])

    def _graph_with_inputs(self, key, rows: int, features, token_ids) -> tuple[_TreeGraph, bool]:
        """The workspace's graph for `key` (True: a new one, still to be captured) with this call's positions
        written into its static inputs: features and token_ids in the first rows (the rows past them are padding,
        written past the prefix, seen by no one, overwritten), and the first slot."""
        graph = self.space.graphs.get(key)
        new = graph is None
        if new:
            graph = _TreeGraph(rows, features.shape[1], self.device, self.space.keys.dtype)
        count = features.shape[0]
        graph.features[:count].copy_(features)
        graph.token_ids[:count].copy_(token_ids)
        graph.start.fill_(self.length)
        return graph, new

    def _replay_catch_up(self, features, token_ids) -> None:
        space = self.space
        key = ("catch-up", CATCH_UP_ROWS)
        graph, new = self._graph_with_inputs(key, CATCH_UP_ROWS, features, token_ids)
        if new:
            def run():  # every tensor it needs made inside: the graph's pool keeps them (a closure's would be freed)
                slots = graph.start + torch.arange(CATCH_UP_ROWS, device=self.device)
                columns = torch.arange(space.capacity, device=self.device)
                with no_cudnn_attention():
                    return feed(self.drafter, space.tensors(captured=True), graph.features, graph.token_ids, slots,
                                slots, columns[None, :] <= slots[:, None])

            graph.out = capture_graph(graph.graph, run, self.device, space)
            space.graphs[key] = graph
        graph.graph.replay()
        self.length += features.shape[0]

    @torch.inference_mode()
    def prefill(self, features: torch.Tensor, token_ids: torch.Tensor) -> None:
        """Feed positions length .. length + K - 1 eagerly, no tree (catch_up without graphs)."""
        count = features.shape[0]
        if not count:
            return
        slots = torch.arange(self.length, self.length + count, device=self.device)
        end = self.length + count
        mask = torch.arange(end, device=self.device)[None, :] <= slots[:, None]
        with no_cudnn_attention():
            feed(self.drafter, self.space.tensors(), features, token_ids.to(self.device), slots, slots, mask)
        self.length = end

    @torch.inference_mode()
    def step(self, features: torch.Tensor, token_ids: torch.Tensor, gamma: int, width: int, budget: int
             ) -> tuple[list[int], list[int]]:
        """Feed the pending positions (features [P, H], token_ids [P], P <= max_rows) and draft a tree of
        depth gamma. Returns (token ids, parents) on the host."""
        count = features.shape[0]
        tree_slots = (gamma - 1) * width
        if self.use_graphs:
            out = self._replay(features, token_ids, gamma, width, budget)
        else:
            start = torch.full((1,), self.length, dtype=torch.long, device=self.device)
            span = self.length + count + tree_slots
            with no_cudnn_attention():
                out = draft_tree(self.drafter, self.space.tensors(), features, token_ids.to(self.device),
                                 torch.full((1,), count, dtype=torch.long, device=self.device), start, gamma, width,
                                 budget, span)
        self.length += count
        ids, parents = out.tolist()
        return ids, parents

    def _replay(self, features, token_ids, gamma: int, width: int, budget: int) -> torch.Tensor:
        key = (gamma, width, budget, self.max_rows)
        graph, new = self._graph_with_inputs(key, self.max_rows, features, token_ids)
        graph.count.fill_(features.shape[0])  # only the tree step reads it (the row whose output is the root)
        if new:
            self._capture(graph, gamma, width, budget)
            self.space.graphs[key] = graph
        graph.graph.replay()
        return graph.out

    def _capture(self, graph: _TreeGraph, gamma: int, width: int, budget: int) -> None:
        """Capture on the real inputs (the cache writes are idempotent), through torch.compile where it is
        allowed and has not failed in this process."""
        global _compile_failed
        space = self.space

        def capture(draft):
            def run():
                with no_cudnn_attention():
                    return draft(self.drafter, space.tensors(captured=True), graph.features, graph.token_ids,
                                 graph.count, graph.start, gamma, width, budget, space.capacity)

            graph.out = capture_graph(graph.graph, run, self.device, space)

        if self.use_compile and not _compile_failed:
            try:
                return capture(_compiled_draft_tree())
            except Exception as error:  # compile is an optimisation: never fail a run over it
                _compile_failed = True
                warnings.warn(f"specviz: torch.compile of EAGLE tree drafting failed ({type(error).__name__}: "
                              f"{str(error)[:200]}); it goes on uncompiled")
                graph.graph = torch.cuda.CUDAGraph()
        capture(draft_tree)


_compiled = None
_compile_failed = False


def _compiled_draft_tree():
    """draft_tree through torch.compile (shapes static: a graph captures one (gamma, width, budget, capacity)):
    uncompiled, a step of seven depths is as long as the verify pass, in small kernels."""
    global _compiled
    if _compiled is None:
        _compiled = torch.compile(draft_tree, dynamic=False)
    return _compiled


_pool_lock = threading.Lock()


def take_workspace(drafter, capacity: int, attention_kernel: bool) -> TreeWorkspace:
    """A free workspace of this capacity and attention from the drafter's pool (graphs captured by earlier runs
    come with it), or a new one."""
    with _pool_lock:
        free = drafter.tree_workspaces.setdefault((capacity, attention_kernel), [])
        if free:
            return free.pop()
    return TreeWorkspace(drafter, capacity, attention_kernel)


def give_back_workspace(drafter, space: TreeWorkspace) -> None:
    with _pool_lock:
        drafter.tree_workspaces.setdefault((space.capacity, space.attention_kernel), []).append(space)
