"""The fast path's KV cache (StaticCache, StaticRunner's base): one preallocated tensor of every layer's keys and
values in the runner's workspace (graphs.Workspace), written by position, so that rolling back is setting
`length`, a draft tree's accepted nodes move down with one gather and one copy, and graphs, which point at the
cache, are captured again only when it grows.
"""
from __future__ import annotations

import torch

from .graphs import next_power_of_two


class StaticCache:
    """The cache operations of a StaticRunner, over its workspace: the first `length` tokens of its sequence are
    cached (positions past it hold stale values that no forward attends to). What they read of the model
    (layers, kv_heads, head_dim, dtype, device, rotary, window, context_length, use_graphs) is StaticRunner's."""

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

    def move_slots(self, sources: torch.Tensor, targets: torch.Tensor) -> None:
        """Copy the keys and values (every layer's) at slots `sources` to slots `targets` (tensors on the
        device): tensor work only, so it can be captured in a graph (the device loop's accepted tree path)."""
        cache = self.workspace.keys_values
        cache.index_copy_(3, targets, cache.index_select(3, sources))

    def ensure_capacity(self, needed: int) -> None:
        """Grow the cache (and the RoPE tables) to hold `needed` positions. On a GPU it starts at 1024 and
        doubles, so that graphs, which point at the cache, are rarely captured again."""
        space = self.workspace
        if needed <= space.capacity:
            return
        if needed > self.context_length:
            raise ValueError(f"{needed} positions exceed the model's context of {self.context_length}")
        floor = 1024 if self.use_graphs else 64
        capacity = min(self.context_length, max(floor, next_power_of_two(needed)))
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
        space.users.clear()
        space.pool = None

    def layer_keys_values(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(keys, values) of every layer over the cached tokens, [1, kv_heads, length, head_dim] as
        transformers lays them out (for tests that compare with a fresh prefill)."""
        space = self.workspace
        return [(space.keys[i, :, : self.length][None], space.values[i, :, : self.length][None])
                for i in range(len(self.layers))]
