"""The device loop: plain decoding and every drafter that offers device drafting (`ngram`, `retrieval`, `eagle`,
`medusa`, the draft model and `early-exit`; chains and draft trees), greedy or sampled, with every step's work
on the GPU.

Why: on a GPU a small target's verify pass is short, and the host loop (engine.py) spends a good part of a
step on the host while the GPU waits: reading the verdict, looking up the next draft, launching the next pass
(docs/fast-path.md has the measurements). Here a step is two CUDA graphs that read and write only device
tensors:

1. the lookup: the proposer's own drafting on the device (Proposer.device_lookup: for `ngram` the sequence's
   n-gram matches, proposers/ngram_device.py; for `retrieval` also the datastore's continuations, merged into
   the weighted trie's heaviest line, proposers/retrieval_device.py; for the drafters that are models their
   forwards over a cache of their own, proposers/eagle_device.py, medusa_device.py, draft_model_device.py)
   written into the verify pass's input;
2. the verify pass (the fast path's forward, runners.static.StaticRunner.decode) and acceptance (greedy, or
   speculative sampling: verify.accept_sampled, the residual, a draw): the accepted tokens appended to the
   sequence on the device, the next pass's first token and position set, and what the target computed for
   them handed to the drafter (DeviceLookup.observe: EAGLE's features, Medusa's hidden state).

Sampled runs draw from a generator of the loop's own, registered with its graphs and seeded from the run's seed
before the first step: a seed reproduces a run. Temperature, top-k and top-p are tensors the graphs read
(sampling.DeviceWarp): one graph serves every setting.

With a draft tree (`--tree N`), the lookup writes the weighted trie's N best nodes (tree_device.weighted_tree,
the trees tree.weighted_trie makes) with their depths and visibility; the verify pass walks the tree greedily
(tree_device.walk_tree) and moves the accepted path's keys and values next to the root's, as StaticRunner.keep_nodes does.

The host only replays them and reads each step's log (its draft, the target's choices, how many were accepted)
one step behind, while the GPU runs the next step: the GPU never waits for the host. The run stops on the host's
reading (max_new_tokens, EOS): the step already launched then is computed and dropped (its time is counted).

Nothing in a step reads a value back to the host (a graph cannot hold that): no tensor is indexed by a 0-d
tensor (that reads the index back), gather / index_select instead; no tensor is made from a host list.

With detail (the app's runs), the verify graph also keeps its logits and drafts, and a third graph computes from
them what the app shows of each step (step_detail): the target's top tokens at every position and its
probability of each drafted token, read back with the step's log, so that the host builds the app's records one
step behind. That graph runs on a second stream (EngineOptions.detail_stream), beside the next step's lookup and
verify pass: a top-k over the vocabulary is a noticeable part of a small target's step, and its small kernels leave
most of the card idle (docs/fast-path.md has the figures). It first copies the kept logits aside, so that the next
verify pass waits only for that copy before it overwrites them.

Exactly the drafts of the host proposers (tests compare them step by step), greedy acceptance as
verify.verify_greedy does it (the output is plain greedy output) and sampled acceptance by the same rule as
verify.verify_sampled and tree.walk_sampled (the output has the target's distribution; tests check it against
the exact distribution, with controls that must fail). The same functions run eagerly on a CPU (the tests),
without graphs.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from ..rule import tree as trees
from ..options import EngineOptions
from ..proposers.base import DeviceLookup
from ..records.schema import TopTokens
from ..runners.graphs import MIN_SPAN, capture_graph, compiled_static, graph_span
from ..runners.static import StaticRunner
from ..rule.sampling import DeviceWarp, draw_with_noise, exponential_noise, warp_with
from ..rule.tree_device import walk_tree, walk_tree_sampled
from ..rule.verify import accept_sampled, next_distribution


# acceptance: pure tensor functions ---------------------------------------------------------------------------

def accept_greedy(logits: torch.Tensor, draft: torch.Tensor, draft_length: torch.Tensor):
    """verify.verify_greedy on the device: logits [G + 1, V], draft [G] (its first draft_length real) ->
    (the target's choices [G + 1], accepted n [], the next token [])."""
    choices = logits.argmax(-1)
    gamma = draft.shape[0]
    agrees = (draft == choices[:gamma]) & (torch.arange(gamma, device=draft.device) < draft_length)
    accepted = agrees.int().cumprod(0).sum()
    return choices, accepted, choices.gather(0, accepted[None])[0]


def top_figures(probs: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor, top: int) -> torch.Tensor:
    """probs [R, V] -> one float32 row: the `top` most probable tokens at each row (probabilities [R, top], then
    their ids [R, top], exact as floats below 2^24), then each token's probability at its row (tokens, rows [N])."""
    values, ids = probs.topk(top, dim=-1)
    drafted = probs.index_select(0, rows).gather(1, tokens[:, None])[:, 0]
    return torch.cat([values.flatten(), ids.float().flatten(), drafted])


def step_detail(p: torch.Tensor, tokens: torch.Tensor, parent_rows: torch.Tensor, top: int,
                q: torch.Tensor | None = None, drawn: tuple | None = None) -> torch.Tensor:
    """What the app shows of a verify pass, as one float32 row: the target's distributions' (p [W, V]: the softmax
    of its logits, or what a sampled step warped them to) top_figures at each position, with each drafted token's
    probability at its parent's row (tokens, parent_rows [W - 1]); with q [G, V], a chain's drafter's distribution
    at each draft, its top_figures after them; with drawn (a sampled step's: the distribution its next token was
    drawn from [V], the row it was drawn at [1], the token [1]), that distribution's top tokens, then p of the
    token at its row."""
    row = [top_figures(p, tokens, parent_rows, top)]
    if q is not None:
        gamma = q.shape[0]
        row.append(top_figures(q, tokens[:gamma], torch.arange(gamma, device=q.device), top))
    if drawn is not None:
        distribution, at, token = drawn
        none = token[:0]
        row.append(top_figures(distribution[None], none, none, top))
        row.append(p.index_select(0, at).gather(1, token[:, None])[:, 0])
    return torch.cat(row)


def read_detail(values: list[float], rows: int, top: int, drafted: int
                ) -> tuple[list[list[float]], list[list[int]], list[float]]:
    """A top_figures row back on the host: (top probabilities [rows][top], top ids [rows][top], the tokens'
    probabilities [drafted])."""
    size = rows * top
    probs = [values[row * top:(row + 1) * top] for row in range(rows)]
    ids = [[int(i) for i in values[size + row * top:size + (row + 1) * top]] for row in range(rows)]
    return probs, ids, values[2 * size:2 * size + drafted]


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


# the loop ---------------------------------------------------------------------------------------------------

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
        DeviceLoop._verify_step's."""
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


@dataclass
class StepOutcome:
    draft_ids: list[int]
    choices: list[int]  # the target's argmax after each draft prefix [len(draft_ids) + 1]; sampled: the next
    # token at n_accepted (the rest -1)
    n_accepted: int
    draft_ms: float
    verify_ms: float
    tree_size: int = 0  # a tree's nodes (draft_ids: the line shown, as the host loop's _verify_tree shows it)
    detail: "StepDetail | None" = None  # with detail: the target's (and a model drafter's) figures along draft_ids
    accept_probs: list[float] | None = None  # sampled: each draft's acceptance probability (as verify_sampled's)
    uniforms: list[float] | None = None  # sampled: the draws compared with them (NaN where none was)
    doubted: bool = False  # the drafter ended its chain early, doubting its last token (settings.draft_stop)

    @property
    def next_token(self) -> int:
        return self.choices[self.n_accepted]


@dataclass
class StepDetail:
    """The target's figures of a step along the drafts shown, as the host loop's records hold them."""
    p_drafts: list[float]  # the target's probability of each draft token
    tops: list[TopTokens]  # the target's most probable tokens before each draft token and after the last
    q_drafts: list[float] | None = None  # a model drafter's (chains): its probability of each draft token
    q_tops: list[TopTokens] | None = None  # and its most probable tokens at each
    next_top: TopTokens | None = None  # sampled: the most probable tokens of what the next token was drawn from
    next_p: float | None = None  # sampled: the target's (warped) probability of the next token


class DeviceLoop:
    """One run's steps on the device (the module's docstring). lookup: the proposer's drafting on the device
    (Proposer.device_lookup; its gamma 0 for plain decoding, its tree the draft tree's nodes, 0 for chains).
    settings: the run's (sampled when its temperature is above 0); residual=False: the sampled verifier's
    control that resamples from p (verify.ON_DEVICE)."""

    def __init__(self, runner, lookup: DeviceLookup, detail_top: int = 0, settings=None, residual: bool = True,
                 detail_stream: bool = True):
        self.runner, self.lookup = runner, lookup
        self.gamma, self.tree = lookup.gamma, lookup.tree
        self.detail_top = detail_top  # with detail: the top tokens kept a position (0: none)
        self.width = self.tree + 1 if self.tree else self.gamma + 1  # the verify pass's positions
        self.sampled = settings is not None and not settings.greedy
        self.filtered = self.sampled and (settings.top_k > 0 or settings.top_p < 1)  # top-k or top-p: a sort
        self.residual = residual
        # how far past a run's tokens the steps launched ahead reach: one more step in flight (gamma + 1 tokens)
        # and what a step writes past the sequence (the verify pass's positions; a drafter's own cache may write
        # more), with a step's worth to spare
        self.ahead = 2 * (self.gamma + 1) + max(self.width, lookup.scratch)
        self.device = runner.device
        self.graphs = runner.use_graphs
        # the detail graph's stream, and the event the next verify pass waits for (the kept logits taken)
        self._side = torch.cuda.Stream(self.device) if self.graphs and detail_top and detail_stream else None
        self._taken: torch.cuda.Event | None = None
        compiled = self.graphs and runner.use_compile
        self._advance = compiled_static(advance) if compiled else advance
        self._write_tree = compiled_static(write_tree) if compiled else write_tree
        self._advance_tree = compiled_static(advance_tree) if compiled else advance_tree
        # a sampled step that filters (top-k, top-p: a sort over the vocabulary) runs eagerly inside its graph:
        # compiled, Inductor failed on it on a GPU (torch 2.11), and such runs fell back to the host loop
        compiled_sampling = compiled and not self.filtered
        self._advance_sampled = compiled_static(advance_sampled_lean) if compiled_sampling else advance_sampled_lean
        self._advance_tree_sampled = (compiled_static(advance_tree_sampled_lean) if compiled_sampling
                                      else advance_tree_sampled_lean)

    @classmethod
    def for_run(cls, runner, proposer, settings, detail_top: int, prompt_length: int,
                residual: bool = True, options: EngineOptions | None = None) -> "DeviceLoop | None":
        """The loop for this run where it applies: the fast path with graphs (or options.device_loop "force"), a
        proposer with device drafting (Proposer.device_lookup) and, for a drafter that is a model, a prompt it can
        read; and room in the context for a step launched ahead.
        detail_top: the top tokens a position the records show (the app's), 0 for records without detail (the
        bench's). residual=False: the sampled verifier's control (verify.ON_DEVICE). options: EngineOptions (None:
        from the environment)."""
        options = options or EngineOptions.from_environment()
        wanted = options.device_loop
        if wanted == "0":
            return None
        if not isinstance(runner, StaticRunner) or not (runner.use_graphs or wanted == "force"):
            return None
        lookup = proposer.device_lookup(settings, runner)
        if lookup is None or (lookup.tree and not runner.supports_tree) or 0 < prompt_length < lookup.min_prompt:
            return None
        loop = cls(runner, lookup, detail_top, settings, residual, options.detail_stream)
        if prompt_length + settings.max_new_tokens + loop.ahead + loop.gamma + 1 > runner.context_length:
            return None
        return loop

    # what the graphs run --------------------------------------------------------------------------------
    def _lookup_step(self, state: LoopState, span: int) -> None:
        lookup = self.lookup
        if self.tree:
            self._write_tree(lookup.draft_tree(state.sequence, state.length, span), state.inputs, state.depths,
                             state.visible, state.parents, state.real)
            return
        if self.sampled:
            draft, length, q = lookup.sample(state.sequence, state.length, span, state.warp, state.generator)
        elif state.q is not None:  # the app's detail: what the drafter's distributions were
            draft, length, q = lookup.draft_shown(state.sequence, state.length, span)
        else:
            (draft, length), q = lookup.draft(state.sequence, state.length, span), None
        if q is not None:
            state.q.copy_(q)
        state.inputs[1:self.gamma + 1].copy_(draft)
        state.draft_length.copy_(length)

    def _verify_step(self, state: LoopState, span: int) -> None:
        # the logits in the model's dtype: the argmax of bfloat16 values is that of their float32 copies (and
        # sampling warps them in float32)
        tree = (state.depths, state.visible) if self.tree else (None, None)
        logits, hidden = self.runner.decode(state.inputs[:self.width], state.inputs[-1:], span, False, *tree,
                                            float_logits=False)
        tokens = state.inputs[1:self.width]  # acceptance writes only the inputs' first and last entries
        parent_rows = state.parents + 1 if self.tree else state.chain_rows  # a tree's root: parent -1, row 0
        q = () if state.q is None else (state.q,)
        if self.detail_top and not self.sampled:
            state.keep((logits, tokens, parent_rows, *q))
        if self.sampled:  # the run's draws: a uniform a draft (a tree's node), Exp(1) noise for the next token
            uniforms = torch.rand(self.tree or self.gamma, generator=state.generator, device=self.device)
            noise = exponential_noise(logits.shape[-1], state.generator, self.device)
            warp = state.warp
            settings = (warp.temperature, warp.top_k, warp.top_p, warp.filtered, uniforms, noise, self.residual)
        if not self.tree:
            chain = (state.sequence, state.length, state.inputs, state.draft_length, state.log)
            if self.sampled and self.detail_top:  # eagerly (in the graph): the detail reads p and the draw's
                accepted, p, left = advance_sampled(logits, state.q, *settings, *chain, state.values)
                state.keep((p, tokens, parent_rows, *q, left, accepted[None], state.inputs[:1]))  # drawn at `accepted`
            elif self.sampled:
                accepted = self._advance_sampled(logits, state.q, *settings, *chain, state.values)
            else:
                accepted = self._advance(logits, *chain)
            self.lookup.observe(hidden, state.kept_rows, accepted)
            return
        if self.sampled:
            walk = (logits, *settings, state.sequence, state.length, state.inputs, state.depths, state.parents,
                    state.real, state.log, state.values, self.gamma)
            if self.detail_top:  # eagerly, as for a chain; drawn at the last accepted node's row
                moved, behind, rows, accepted, p, left = advance_tree_sampled(*walk)
                state.keep((p, tokens, parent_rows, left, rows.gather(0, accepted[None]), state.inputs[:1]))
            else:
                moved, behind, rows, accepted = self._advance_tree_sampled(*walk)
        else:
            moved, behind, rows, accepted = self._advance_tree(
                logits, state.sequence, state.length, state.inputs, state.depths, state.visible, state.parents,
                state.real, state.log, self.gamma)
        # the accepted nodes' keys and values (every layer's) moved next to the root's, as runner.keep_nodes
        # does; outside compiled code, which might copy the whole cache to write into it
        self.runner.move_slots(moved, behind)
        self.lookup.observe(hidden, rows, accepted)

    @staticmethod
    def _take_step(state: LoopState) -> None:
        for mine, kept in zip(state.taken, state.kept):
            mine.copy_(kept)

    def _detail_step(self, state: LoopState) -> None:
        if self.sampled:  # p: the warped distributions; q: a chain's drafter's, where it has them
            p, tokens, rows, *q, left, at, token = state.taken
            state.detail.copy_(step_detail(p, tokens, rows, self.detail_top, *q, drawn=(left, at, token)))
        else:
            logits, tokens, rows, *q = state.taken
            state.detail.copy_(step_detail(logits.float().softmax(-1), tokens, rows, self.detail_top, *q))

    # state and graphs -----------------------------------------------------------------------------------
    def _state(self) -> LoopState:
        space = self.runner.workspace
        flavour = ("sampled", self.filtered, self.residual) if self.sampled else ("greedy",)
        key = ("device-loop", *self.lookup.key(), self.detail_top, *flavour)
        state = space.users.get(key)
        if state is None or state.capacity != space.capacity:
            warp = DeviceWarp.make(self.device, self.filtered) if self.sampled else None
            state = space.users[key] = LoopState(
                self.device, space.capacity, self.gamma, self.tree, self.detail_top,
                self.lookup.workspace(self.device, space.capacity), warp, self.runner.head.shape[0],
                self.lookup.has_q)
        self.lookup.use(state.drafting)
        return state

    def _capture(self, state: LoopState, span: int) -> None:
        space = self.runner.workspace
        generators = (state.generator,) if self.sampled else ()
        if self._side is not None:  # a capture runs the verify step, which overwrites what the detail reads
            torch.cuda.current_stream(self.device).wait_stream(self._side)
        if self.gamma and span not in state.lookup_graphs:
            graph = torch.cuda.CUDAGraph()
            capture_graph(graph, lambda: self._lookup_step(state, span), self.device, space, generators)  # idempotent
            state.lookup_graphs[span] = graph
        # a verify step moves the state on: it runs three times while captured, and is put back after
        saved = [tensor.clone() for tensor in (state.sequence, state.length, state.inputs)]
        graph = torch.cuda.CUDAGraph()
        capture_graph(graph, lambda: self._verify_step(state, span), self.device, space, generators)
        for tensor, value in zip((state.sequence, state.length, state.inputs), saved):
            tensor.copy_(value)
        state.verify_graphs[span] = graph
        if self.detail_top and state.detail_graph is None:  # after a verify step has kept what they read
            take, detail = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            capture_graph(take, lambda: self._take_step(state), self.device, state)
            capture_graph(detail, lambda: self._detail_step(state), self.device, state)
            state.take_graph, state.detail_graph = take, detail  # both or neither: a capture may stop between them

    def _spans(self, max_length: int) -> list[int]:
        last, spans = graph_span(max_length, self.runner.context_length), []
        span = min(MIN_SPAN, last)
        while span < last:
            spans.append(span)
            span *= 2
        return spans + [last]

    def reserve(self, max_length: int) -> None:
        """Room in the cache for runs of up to max_length tokens, with the steps launched ahead."""
        self.runner.ensure_capacity(graph_span(max_length + self.ahead + self.gamma + 1, self.runner.context_length))

    @torch.inference_mode()
    def prepare(self, max_length: int) -> None:
        """Capture, untimed, every graph that runs of up to max_length tokens replay (api.warm_up)."""
        self.reserve(max_length)
        if self.graphs:
            state = self._state()
            for span in self._spans(max_length + self.ahead + self.gamma + 1):
                if span not in state.verify_graphs:
                    self._capture(state, span)

    # the run --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def steps(self, sequence: torch.Tensor, max_new_tokens: int, hidden: torch.Tensor | None = None,
              settings=None, seed: int = 0):
        """Yields a StepOutcome a step, read one step behind the device. sequence [T]: on the runner's device;
        the runner's cache must hold sequence[:-1] (the engine's prefill), whose hidden states are `hidden`
        [T - 1, H] (what a drafter that is a model reads first). A sampled run's draws start from `seed`, with
        the temperature, top-k and top-p of `settings`. No step is launched once those in flight give
        max_new_tokens; to stop earlier (an EOS), stop pulling: the step in flight is then computed and dropped
        (the caller's clock waits for it)."""
        self.reserve(sequence.shape[0] + max_new_tokens)
        state = self._state()
        state.start(sequence)
        if self.sampled:
            state.warp.set(settings)
            state.generator.manual_seed(seed)
        self.lookup.start(sequence, hidden)
        self._taken = None
        produced, step, in_flight = 0, 0, deque()  # produced: tokens of the steps read so far
        most = max_new_tokens + 1  # every step adds a token: never reached
        rows = torch.empty((most, state.log.shape[0]), dtype=torch.long, pin_memory=self.graphs)
        values = torch.empty((most, state.values.shape[0]), pin_memory=self.graphs)
        details = torch.empty((most, state.detail.shape[0]), pin_memory=self.graphs)
        while True:
            enough = produced + len(in_flight) >= max_new_tokens  # what is in flight adds a token a step at least
            if len(in_flight) < 2 and not enough and step < most:  # two in flight: the GPU never waits for the host
                # the step in flight may add gamma + 1 tokens; the span covers what the new one writes
                span = graph_span(sequence.shape[0] + produced + self.ahead, self.runner.context_length)
                in_flight.append((step, self._launch(state, span, rows[step], values[step], details[step])))
                step += 1
                continue
            if not in_flight:
                return
            done, events = in_flight.popleft()
            outcome = self._read(events, rows[done], values[done], details[done])
            produced += outcome.n_accepted + 1
            yield outcome

    def _launch(self, state: LoopState, span: int, row: torch.Tensor, values: torch.Tensor, detail: torch.Tensor):
        if not self.graphs:  # eagerly, a step at a time
            if self.gamma:
                self._lookup_step(state, span)
            self._verify_step(state, span)
            if self.detail_top:
                self._take_step(state)
                self._detail_step(state)
            row.copy_(state.log)
            values.copy_(state.values)
            detail.copy_(state.detail)
            return None
        if span not in state.verify_graphs:
            self._capture(state, span)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        events[0].record()
        if self.gamma:
            state.lookup_graphs[span].replay()
        events[1].record()
        if self._taken is not None:  # the previous step's detail has copied the logits this pass overwrites
            torch.cuda.current_stream(self.device).wait_event(self._taken)
        state.verify_graphs[span].replay()
        row.copy_(state.log, non_blocking=True)
        if self.sampled:
            values.copy_(state.values, non_blocking=True)
        events[2].record()
        if self.detail_top:
            events.append(self._launch_detail(state, events[2], detail))
        return events

    def _launch_detail(self, state: LoopState, verified: torch.cuda.Event, detail: torch.Tensor) -> torch.cuda.Event:
        """The step's detail after its verify pass, on the side stream (or, with detail_stream off, on the verify
        pass's own); returns the event of its copy to the host."""
        stream = self._side or torch.cuda.current_stream(self.device)
        stream.wait_event(verified)
        with torch.cuda.stream(stream):
            state.take_graph.replay()
            self._taken = torch.cuda.Event()
            self._taken.record(stream)
            state.detail_graph.replay()
            detail.copy_(state.detail, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(stream)
        return copied

    def _read(self, events, row: torch.Tensor, values: torch.Tensor, detail: torch.Tensor) -> StepOutcome:
        draft_ms = verify_ms = 0.0
        if events is not None:
            for event in events[2:]:  # the step's log, then its detail (when it has one)
                event.synchronize()
            draft_ms, verify_ms = events[0].elapsed_time(events[1]), events[1].elapsed_time(events[2])
        log, gamma = row.tolist(), self.gamma
        figures = values.tolist() if self.sampled else None
        if self.tree:
            outcome, line = self._tree_outcome(log, figures, draft_ms, verify_ms)
        else:
            length, accepted = log[2 * gamma + 1], log[2 * gamma + 2]
            outcome, line = StepOutcome(draft_ids=log[:length], choices=log[gamma:gamma + length + 1],
                                        n_accepted=accepted, draft_ms=draft_ms, verify_ms=verify_ms,
                                        doubted=self.lookup.stops and length < gamma), range(length)
            if figures is not None:
                outcome.accept_probs = figures[:length]
                outcome.uniforms = figures[gamma:gamma + length]
        if self.detail_top:
            outcome.detail = self._detail_of(detail.tolist(), line)
        return outcome

    def _detail_of(self, values: list[float], line) -> "StepDetail":
        """A step_detail row read back along the line shown (a chain's drafts; a tree's nodes)."""
        top, width, gamma = self.detail_top, self.width, self.gamma
        probs, ids, drafted = read_detail(values, width, top, width - 1)
        rows = [0] + [node + 1 for node in line]  # the rows before each token shown, and after the last
        detail = StepDetail(p_drafts=[drafted[node] for node in line],
                            tops=[TopTokens(ids=ids[r], probs=probs[r]) for r in rows])
        rest = values[width * (2 * top + 1) - 1:]
        if self.lookup.has_q and not self.tree:  # a chain's drafter's figures after the target's
            probs, ids, drafted = read_detail(rest, gamma, top, gamma)
            detail.q_drafts = [drafted[i] for i in line]
            detail.q_tops = [TopTokens(ids=ids[i], probs=probs[i]) for i in line]
            rest = rest[gamma * (2 * top + 1):]
        if self.sampled:  # where the next token was drawn from, and p of it
            probs, ids, _ = read_detail(rest, 1, top, 0)
            detail.next_top, detail.next_p = TopTokens(ids=ids[0], probs=probs[0]), rest[2 * top]
        return detail

    def _tree_outcome(self, log: list[int], figures: list[float] | None, draft_ms: float, verify_ms: float
                      ) -> tuple[StepOutcome, list[int]]:
        """A tree step's log, shown as the host loop's _verify_tree shows it: the accepted path, then the
        drafter's favourite line below where it stopped, with the target's choice before each (sampled: the
        acceptance probability of each node the walk tried, and where it tried none, p at its parent's row)."""
        budget = self.tree
        count, accepted = log[3 * budget + 1], log[3 * budget + 2]
        tokens, parents = log[:count], log[budget:budget + count]
        walked = log[2 * budget:3 * budget + 1]
        if figures is None:
            path = trees.walk_greedy(tokens, parents, walked[:count + 1]).path
            if len(path) != accepted:
                raise RuntimeError(f"the device accepted {accepted} tree nodes where the host's walk accepts {len(path)}")
        else:
            path = walked[:accepted]
        line = path + trees.first_child_chain(parents, path[-1] if path else -1)
        if figures is None:
            choices = [walked[row] for row in [0] + [node + 1 for node in line]]
        else:
            choices = [-1] * len(line) + [-1]
            choices[accepted] = walked[budget]
        outcome = StepOutcome(draft_ids=[tokens[node] for node in line], choices=choices, n_accepted=accepted,
                              draft_ms=draft_ms, verify_ms=verify_ms,
                              tree_size=0 if trees.is_chain(parents) else count)  # as the host loop counts it
        if figures is not None:
            accept, p_of, uniforms = figures[:budget], figures[budget:2 * budget], figures[2 * budget:]
            tried = tried_nodes(parents, path)
            outcome.accept_probs = [accept[node] if node in tried else p_of[node] for node in line]
            outcome.uniforms = [uniforms[node] if node in tried else float("nan") for node in line]
        return outcome, line


def tried_nodes(parents: list[int], path: list[int]) -> set[int]:
    """The nodes a sampled walk tried: below the root and each node of the accepted path, the children in order
    up to the one accepted (every child where the walk stopped)."""
    kids = trees.children(parents)
    tried = set()
    for above, taken in zip([-1] + path, path + [None]):
        for child in kids[above + 1]:
            tried.add(child)
            if child == taken:
                break
    return tried
