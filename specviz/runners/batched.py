"""A batch of sequences of different lengths through a Llama-family model over one static KV cache: each row
has its own length, writes its new tokens at its own slots and attends to its own tokens only (a ragged batch).
Every row feeds the same number of new tokens a forward (a plain step: 1; a verify pass: gamma + 1, a short
draft padded), and rolls back to its own length afterwards.

The layer is the fast path's (llama.py): its projections and MLP take the batch's tokens as one [B * K, H]
matrix, so a forward reads every weight once whatever the batch; attention runs per row over that row's cache.
On a CPU in float32 the matrices are the fast path's oneDNN prepacked ones (onednn.py; shared with it, packed
once a model).

On a GPU a whole-batch forward is a CUDA graph: eager, the step is bound by launching its ~1,000 kernels, the
same time at any batch size for a small model (docs/design.md, Batches), which hides what the batch costs the
device. Graph
shapes are fixed, so a forward is padded: the attention span up to a power of two (graphs.graph_span) and the
batch up to a power of two with idle rows (length 0, token 0, their logits dropped). Rows that leave are
moved down in place, so the cache's address, which the graphs hold, never changes; runners are pooled per
model and shape (batched_runner), so graphs are captured once, not once a call.

The host keeps each row's length beside the device's copy, so a forward needs no device-to-host read to know
how far its rows reach; the mask, the cache slots written and the rotary angles are made once a forward, not
once a layer."""
from __future__ import annotations

import threading
import warnings
import weakref

import torch
import torch.nn.functional as F

from ..models.configs import head_dim, kv_heads, norm_eps
from ..options import EngineOptions
from .graphs import capture_graph, graph_span, next_power_of_two, no_cudnn_attention
from .llama import layer_input, layer_mlp, layer_weights, rms_norm, text_config, unsupported_reason
from .onednn import model_matrices, onednn_allowed, parameter_bytes


def grouped_mask(mask: torch.Tensor, heads: int, kv_heads: int) -> torch.Tensor:
    """mask [B, K, span] -> [B, 1, group * K, span], the rows batched_attention's grouped query heads read."""
    return mask.repeat(1, heads // kv_heads, 1)[:, None]


def batched_attention(q, keys, values, rows_mask, kv_heads: int):
    """q [B, K, heads, D] over keys/values [B, kv_heads, span, D] with rows_mask (grouped_mask of [B, K, span],
    True = may attend) -> [B, K, heads * D]; grouped-query heads as extra rows, as llama.sdpa_attention does for
    one row."""
    batch, count, heads, head_dim = q.shape
    group = heads // kv_heads
    q = q.reshape(batch, count, kv_heads, group, head_dim).permute(0, 2, 3, 1, 4)
    q = q.reshape(batch, kv_heads, group * count, head_dim)
    attended = F.scaled_dot_product_attention(q, keys, values, attn_mask=rows_mask)
    return attended.reshape(batch, kv_heads, group, count, head_dim).permute(0, 3, 1, 2, 4).reshape(
        batch, count, heads * head_dim)


class PaddedShape:
    """A forward of fixed shape: static token ids [width, count], and once run or captured its logits."""

    def __init__(self, width: int, count: int, device: torch.device, graph: bool):
        self.ids = torch.zeros(width, count, dtype=torch.long, device=device)
        self.graph = torch.cuda.CUDAGraph() if graph else None
        self.logits: torch.Tensor | None = None


class BatchedRunner:
    """forward(ids [B, K]) appends K tokens to each row at its own length and returns logits [B, K, V];
    rollback(lengths [B]) keeps each row's first lengths[b] tokens; keep(rows) drops the other rows.
    padded_shapes: whole-batch forwards in the graphs' padded shapes (default: where graphs are used; the
    tests set it on a CPU to check the padding without a GPU). options: EngineOptions (None: from the
    environment)."""

    def __init__(self, model: torch.nn.Module, batch: int, capacity: int, padded_shapes: bool | None = None,
                 options: EngineOptions | None = None):
        options = options or EngineOptions.from_environment()
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"batched decoding needs the fast path's models: {reason}")
        config = text_config(model)
        decoder = model.get_decoder()
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.heads = config.num_attention_heads
        self.kv_heads, self.head_dim = kv_heads(config), head_dim(config)
        if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
            raise ValueError("batched decoding does not implement sliding-window attention")
        self.layers = [layer_weights(layer) for layer in decoder.layers]
        head = model.get_output_embeddings()
        self.head = head.weight.detach()
        # MKL's products repack the weights each call: on a CPU that makes a batch-1 step twice the fast path's
        self.use_onednn = options.onednn and onednn_allowed(self.device, self.dtype, parameter_bytes(model))
        self.layer_tensors, self.head_matrix, self.linear = model_matrices(decoder, self.layers, head,
                                                                           self.use_onednn)
        self.embed = decoder.embed_tokens.weight.detach()
        self.final_norm = decoder.norm.weight.detach()
        self.final_eps = norm_eps(decoder.norm)
        self.head_bias = None if getattr(head, "bias", None) is None else head.bias.detach()
        self.capacity = capacity
        self.width = batch  # rows allocated; self.batch of them in use
        shape = (len(self.layers), batch, self.kv_heads, capacity, self.head_dim)
        self.keys = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.values = torch.zeros(shape, dtype=self.dtype, device=self.device)
        positions = torch.arange(capacity, device=self.device)[None]
        with torch.no_grad():
            cos, sin = decoder.rotary_emb(torch.zeros(1, dtype=self.dtype, device=self.device), positions)
        self.cos, self.sin = cos[0].to(self.dtype), sin[0].to(self.dtype)
        self.all_lengths = torch.zeros(batch, dtype=torch.long, device=self.device)  # rows past self.batch: 0
        self.host_lengths = [0] * batch  # the rows in use, on the host: no device read to know a forward's span
        self.use_graphs = self.device.type == "cuda" and options.graphs
        self.padded_shapes = self.use_graphs if padded_shapes is None else padded_shapes
        self.shapes: dict[tuple, PaddedShape] = {}  # (width, count, span) -> its static ids and logits
        self.pool = None  # the graphs' shared memory pool (graphs.capture_graph)

    @property
    def batch(self) -> int:
        return len(self.host_lengths)

    @property
    def lengths(self) -> torch.Tensor:
        return self.all_lengths[:self.batch]

    def reset(self) -> None:
        """Every allocated row back in use, empty (a pooled runner's next call)."""
        self.host_lengths = [0] * self.width
        self.all_lengths.zero_()

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor, logits_for: str = "all", rows: slice = slice(None)) -> torch.Tensor | None:
        """ids [B, K] -> logits [B, K, V] in float32 (logits_for="none": no logits, a prefill's). rows: the rows
        fed (a prefill feeds one row at a time: prompts differ in length)."""
        batch, count = ids.shape
        rows = slice(*rows.indices(self.batch))
        host = self.host_lengths[rows]
        end = max(host) + count
        if end > self.capacity:
            raise ValueError(f"{end} positions exceed the batch's cache of {self.capacity}")
        if self.padded_shapes and logits_for == "all" and rows == slice(0, self.batch, 1):
            logits = self._padded_forward(ids, count, end)
        else:
            logits = self._compute(ids.to(self.device), rows, end, logits_for)
        self.all_lengths[rows] += count
        self.host_lengths[rows] = [length + count for length in host]
        return logits

    def _padded_forward(self, ids: torch.Tensor, count: int, end: int) -> torch.Tensor:
        """The batch's forward in a fixed shape (the module's docstring), replayed from a graph where there is one."""
        width = min(self.width, next_power_of_two(self.batch))
        span = graph_span(end, self.capacity)
        shape = self.shapes.get((width, count, span))
        if shape is None:
            shape = self._make_shape(width, count, span)
        shape.ids[:self.batch].copy_(ids, non_blocking=True)
        shape.ids[self.batch:].zero_()
        if shape.graph is None:
            return self._compute(shape.ids, slice(0, width), span, "all")[:self.batch]
        shape.graph.replay()
        return shape.logits[:self.batch].clone()  # the graph's buffer is the next replay's: callers keep views

    def _make_shape(self, width: int, count: int, span: int) -> PaddedShape:
        shape = PaddedShape(width, count, self.device, graph=self.use_graphs)
        if shape.graph is not None:
            try:  # the rows' new slots are written with token 0 while capturing: the replay writes them again
                shape.logits = capture_graph(shape.graph,
                                             lambda: self._compute(shape.ids, slice(0, width), span, "all"),
                                             self.device, self)
            except Exception as error:  # an optimisation: never fail a run over it
                warnings.warn(f"specviz: batched CUDA graphs unavailable ({type(error).__name__}: {str(error)[:200]}); "
                              "running the batched forward eagerly")
                self.use_graphs = False
                shape.graph = None
        self.shapes[(width, count, span)] = shape
        return shape

    def _compute(self, ids: torch.Tensor, rows: slice, span: int, logits_for: str) -> torch.Tensor | None:
        """The forward of ids [B, K] (on the device) for the cache's `rows`, attending to the first `span`
        positions; lengths are not advanced (a captured graph runs it as is)."""
        batch, count = ids.shape
        positions = self.all_lengths[rows][:, None] + torch.arange(count, device=self.device)  # [B, K]: slots written
        # the slots of a layer's cache [B, kv_heads, capacity, D] (flattened) that the new keys and values go to
        slots = ((torch.arange(batch, device=self.device)[:, None, None] * self.kv_heads
                  + torch.arange(self.kv_heads, device=self.device)[None, :, None]) * self.capacity
                 + positions[:, None, :]).reshape(-1)
        mask = torch.arange(span, device=self.device)[None, None, :] <= positions[:, :, None]  # [B, K, span]
        rows_mask = grouped_mask(mask, self.heads, self.kv_heads)
        cos, sin = self.cos[positions].reshape(batch * count, -1), self.sin[positions].reshape(batch * count, -1)
        x = F.embedding(ids.reshape(-1), self.embed)  # [B * K, H]
        with no_cudnn_attention():  # eager, the span grows every forward: cuDNN would build a plan each time
            x, pending = self._layers(x, batch, count, span, rows, slots, rows_mask, cos, sin)
        if logits_for == "none":
            return None
        hidden = rms_norm(x + pending, self.final_norm, self.final_eps)
        return self.linear(hidden, self.head_matrix, self.head_bias).view(batch, count, -1).float()
    def _layers(self, x, batch, count, end, rows, slots, rows_mask, cos, sin):
        """The decoder layers over x [B * K, H]: each writes its keys and values at `slots` and attends to its
        rows' first `end` positions. Returns (x, pending), the residual stream and the last MLP's output."""
        pending = torch.zeros_like(x)
        linear = self.linear
        for i, layer in enumerate(self.layers):
            weights = self.layer_tensors[i]
            q, k, v, x = layer_input(x, pending, weights, layer.eps, cos, sin, self.heads, self.kv_heads,
                                     self.head_dim, linear)
            keys, values = self.keys[i, rows], self.values[i, rows]  # a slice of rows: contiguous
            keys.view(-1, self.head_dim).index_copy_(
                0, slots, k.view(batch, count, self.kv_heads, self.head_dim).transpose(1, 2).reshape(-1, self.head_dim))
            values.view(-1, self.head_dim).index_copy_(
                0, slots, v.view(batch, count, self.kv_heads, self.head_dim).transpose(1, 2).reshape(-1, self.head_dim))
            attended = batched_attention(q.view(batch, count, self.heads, self.head_dim), keys[:, :, :end],
                                         values[:, :, :end], rows_mask, self.kv_heads)
            _, _, o_w, o_b = weights[:4]
            x, pending = layer_mlp(x, linear(attended.reshape(batch * count, -1), o_w, o_b), weights, layer.eps,
                                   linear)
        return x, pending

    def rollback(self, lengths: torch.Tensor | list[int]) -> None:
        """Keep each row's first lengths[b] tokens (the slots past them are written over by later forwards).
        A list is the host's own count: one host-to-device copy, no read back."""
        host = lengths if isinstance(lengths, list) else lengths.tolist()
        self.host_lengths = [int(length) for length in host]
        self.lengths.copy_(torch.tensor(self.host_lengths, dtype=torch.long))

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (finished sequences stop costing); the kept rows in that order, moved
        down in place (graphs hold the cache's address)."""
        index = torch.tensor(rows, dtype=torch.long, device=self.device)
        kept = len(rows)
        self.keys[:, :kept] = self.keys.index_select(1, index)
        self.values[:, :kept] = self.values.index_select(1, index)
        self.all_lengths[:kept] = self.all_lengths.index_select(0, index)
        self.all_lengths[kept:] = 0
        self.host_lengths = [self.host_lengths[row] for row in rows]


_pool: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {(batch, capacity): [free runners]}
_pool_lock = threading.Lock()
CAPACITY_STEP = 64  # capacities rounded up to a multiple: calls with nearby lengths share a runner and its graphs


def batched_runner(model: torch.nn.Module, batch: int, capacity: int,
                   options: EngineOptions | None = None) -> BatchedRunner:
    """A runner of `batch` rows holding at least `capacity` positions: where it uses graphs, one given back
    earlier (its graphs already captured), else a new one."""
    capacity = -(-capacity // CAPACITY_STEP) * CAPACITY_STEP
    with _pool_lock:
        free = _pool.get(model, {}).get((batch, capacity))
        runner = free.pop() if free else None
    if runner is None:
        return BatchedRunner(model, batch, capacity, options=options)
    runner.reset()
    return runner


def give_back(model: torch.nn.Module, runner: BatchedRunner) -> None:
    """The runner for a later call on this model; only runners with graphs are kept (a CPU's are cheap to make)."""
    if runner.use_graphs:
        with _pool_lock:
            _pool.setdefault(model, {}).setdefault((runner.width, runner.capacity), []).append(runner)
