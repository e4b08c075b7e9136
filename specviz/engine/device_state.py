"""The device loop's state (LoopState): the tensors its graphs read and write, at fixed addresses, and its graphs.
A graph replays on the tensors it was captured on, so a loop keeps them in the runner's workspace from run to run.
"""
from __future__ import annotations

import torch

from ..rule.sampling import DeviceWarp


class LoopState:
    """The tensors that a loop's graphs read and write (fixed addresses) and its graphs: one lookup graph and
    one verify graph per attention span. Kept in the runner's workspace beside the runner's own graphs (and
    dropped with them when the cache grows). tree: the nodes of a draft tree (0: a chain). drafting: the
    lookup's own tensors (DeviceLookup.workspace). sampled: a sampled run's state too (its generator, its
    settings as tensors, q and the verifier's figures)."""

    def __init__(self, device: torch.device, capacity: int, gamma: int, tree: int = 0, detail_top: int = 0,
                 drafting=None, sampled: DeviceWarp | None = None, vocab: int = 0, has_q: bool = False):
        self.capacity = capacity
        width = tree + 1 if tree else gamma + 1  # the verify pass's positions
        self.sequence = torch.zeros(capacity + gamma + 2, dtype=torch.long, device=device)  # last entry: a sink
        self.length = torch.zeros(1, dtype=torch.long, device=device)
        self.inputs = torch.zeros(width + 1, dtype=torch.long, device=device)  # the verify pass's: ids, start
        self.draft_length = torch.zeros((), dtype=torch.long, device=device)
        self.log = torch.zeros(3 * tree + 3 if tree else 2 * gamma + 3, dtype=torch.long, device=device)
        self.drafting = drafting
        self.warp = sampled
        # a sampled step's figures (acceptance probabilities, uniforms; a tree's: also p at each parent's row)
        self.values = torch.zeros((3 * tree if tree else 2 * gamma) if sampled else 0, device=device)
        # q: a chain's drafter's distributions (sampled: what it drew from; with detail: what the app shows)
        self.q = torch.zeros(gamma, vocab, device=device) if (sampled or detail_top) and has_q and not tree else None
        self.generator = torch.Generator(device) if sampled else None
        # step_detail's row (detail_top: its top tokens a position; 0: no detail): the target's positions, the
        # drafter's, a sampled step's next token's distribution
        rows = width + (gamma if self.q is not None else 0) + (sampled is not None)
        self.detail = torch.zeros(rows * (2 * detail_top + 1) - 1 if detail_top else 0, device=device)
        # what step_detail reads: the verify pass's logits (a sampled step's: p), drafts and the rows that score
        # them, a chain's q, a sampled step's draw, as the verify graph leaves them ("kept") and as the detail
        # graph copies them aside ("taken"); made by the first verify step, which runs before any capture
        self.kept: list[torch.Tensor] | None = None
        self.taken: list[torch.Tensor] | None = None
        self.chain_rows = torch.arange(gamma, device=device)  # a chain's drafts are scored at rows 0..gamma-1
        self.kept_rows = torch.arange(gamma + 1, device=device)  # a chain's positions kept, as observe() reads them
        if tree:  # the tree's layout (write_tree writes it)
            self.depths = torch.zeros(width, dtype=torch.long, device=device)
            self.visible = torch.eye(width, dtype=torch.bool, device=device)
            self.visible[:, 0] = True
            self.parents = torch.full((tree,), -1, dtype=torch.long, device=device)
            self.real = torch.zeros(tree, dtype=torch.bool, device=device)
        self.lookup_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.verify_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.take_graph: torch.cuda.CUDAGraph | None = None  # kept -> taken
        self.detail_graph: torch.cuda.CUDAGraph | None = None  # taken -> detail
        # the detail graphs' own memory pool: graphs in one pool may reuse each other's temporaries, which is
        # safe only for graphs that never run at once, and these run beside the verify graphs
        self.pool = None

    def keep(self, given: tuple) -> None:
        """Copies what step_detail reads into `kept` (made on the first call, with `taken`, its copy's place):
        the device loop's verify step's."""
        if self.kept is None:
            self.kept = [torch.empty_like(t) for t in given]
            self.taken = [torch.empty_like(t) for t in given]
        for mine, value in zip(self.kept, given):
            mine.copy_(value)

    def start(self, sequence: torch.Tensor) -> None:
        """sequence [T] on the device: copies that queue behind what runs there (a prefill), no wait."""
        count = sequence.shape[0]
        self.sequence[:count].copy_(sequence, non_blocking=True)
        self.length.fill_(count)
        self.inputs[:1].copy_(sequence[-1:], non_blocking=True)
        self.inputs[-1].fill_(count - 1)
