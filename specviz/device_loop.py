"""The device loop: greedy plain, `ngram` and `retrieval` decoding (chains and draft trees) with every step's
work on the GPU.

Why: on a GPU a small target's verify pass is short, and the host loop (engine.py) spends a good part of a
step on the host while the GPU waits: reading the verdict, looking up the next draft, launching the next pass
(docs/fast-path.md has the measurements). Here a step is two CUDA graphs that read and write only device
tensors:

1. the lookup: the proposer's own drafting on the device (Proposer.device_lookup: for `ngram` the sequence's
   n-gram matches, proposers/ngram_device.py; for `retrieval` also the datastore's continuations, merged into
   the weighted trie's heaviest line, proposers/retrieval_device.py) written into the verify pass's input;
2. the verify pass (the fast path's forward, runners.static.StaticRunner.decode) and greedy acceptance: the accepted
   tokens appended to the sequence on the device, the next pass's first token and position set.

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

Exactly the drafts of the host proposers (tests compare them step by step), and greedy acceptance as
verify.verify_greedy does it: the output is plain greedy output. The same functions run eagerly on a CPU
(the tests), without graphs.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from . import tree as trees
from .options import EngineOptions
from .proposers.base import DeviceLookup
from .records import TopTokens
from .runners.graphs import MIN_SPAN, capture_graph, compiled_static, graph_span
from .runners.static import StaticRunner
from .tree_device import walk_tree, weighted_tree


# acceptance: pure tensor functions ---------------------------------------------------------------------------

def accept_greedy(logits: torch.Tensor, draft: torch.Tensor, draft_length: torch.Tensor):
    """verify.verify_greedy on the device: logits [G + 1, V], draft [G] (its first draft_length real) ->
    (the target's choices [G + 1], accepted n [], the next token [])."""
    choices = logits.argmax(-1)
    gamma = draft.shape[0]
    agrees = (draft == choices[:gamma]) & (torch.arange(gamma, device=draft.device) < draft_length)
    accepted = agrees.int().cumprod(0).sum()
    return choices, accepted, choices.gather(0, accepted[None])[0]


def step_detail(logits: torch.Tensor, tokens: torch.Tensor, parent_rows: torch.Tensor, top: int) -> torch.Tensor:
    """What the app shows of a verify pass, as one float32 row: logits [W, V] -> the softmax's `top` most
    probable tokens at each position (probabilities [W, top], then their ids [W, top], exact as floats below
    2^24), then each drafted token's probability at its parent's row (tokens, parent_rows [W - 1])."""
    probs = logits.float().softmax(-1)
    values, ids = probs.topk(top, dim=-1)
    drafted = probs.index_select(0, parent_rows).gather(1, tokens[:, None])[:, 0]
    return torch.cat([values.flatten(), ids.float().flatten(), drafted])


def read_detail(values: list[float], width: int, top: int) -> tuple[list[list[float]], list[list[int]], list[float]]:
    """step_detail's row back on the host: (top probabilities [W][top], top ids [W][top], drafted [W - 1])."""
    size = width * top
    probs = [values[row * top:(row + 1) * top] for row in range(width)]
    ids = [[int(i) for i in values[size + row * top:size + (row + 1) * top]] for row in range(width)]
    return probs, ids, values[2 * size:]


def advance(logits, sequence, length, inputs, draft_length, log) -> None:
    """After a verify pass over inputs = [the last token, the draft [G], the first position]: accept greedily,
    append the accepted drafts and the next token to sequence (the first `length` [1] entries; its last entry
    is a sink for the slots not written), and set the next pass's first token and position. log [2G + 3]:
    the draft, the target's choices, the draft's length, accepted."""
    gamma = inputs.shape[0] - 2
    draft = inputs[1:gamma + 1]
    choices, accepted, next_token = accept_greedy(logits, draft, draft_length)
    slots = torch.arange(gamma + 1, device=inputs.device)
    values = torch.where(slots < accepted, torch.cat([draft, draft.new_zeros(1)]), next_token)
    sink = sequence.shape[0] - 1
    sequence.index_copy_(0, torch.where(slots <= accepted, length + slots, sink), values)
    log.copy_(torch.cat([draft, choices, draft_length[None], accepted[None]]))
    length.add_(accepted + 1)
    inputs[0].copy_(next_token)
    inputs[gamma + 1:].copy_(length - 1)


def tree_lookup(candidates, budget: int, inputs, depths, visible, parents, real) -> None:
    """A draft tree of the candidates (own, or own and stored: each tokens, valid, weights) written into the
    verify pass's inputs: ids (the root first), depths [B + 1] and visibility [B + 1, B + 1] (the root sees
    itself, every node the root and its ancestors), and parents, real [B] (what advance_tree reads)."""
    tokens, valid, weights = (torch.cat(parts) for parts in zip(*candidates))
    node_tokens, node_parents, node_depths, node_real, ancestors = weighted_tree(tokens, valid, weights, parents.shape[0])
    inputs[1:node_tokens.shape[0] + 1].copy_(node_tokens)
    depths[1:].copy_(node_depths)
    visible[1:, 1:].copy_(ancestors)
    parents.copy_(node_parents)
    real.copy_(node_real)


def advance_tree(logits, sequence, length, inputs, depths, visible, parents, real, log, gamma: int):
    """advance() after a tree verify pass over inputs = [the last token, the tree [B], the first position]:
    the accepted path's tokens and the next token appended. Returns (the cache slots of the path's nodes, the
    slots they move to: right after the root's), for the caller to move their keys and values. log [3B + 3]:
    the tree's tokens, parents, the target's choices, the number of real nodes, accepted."""
    budget = parents.shape[0]
    tokens = inputs[1:budget + 1]
    choices, accepted, path, next_token = walk_tree(logits, tokens, parents, real, visible[1:, 1:], depths[1:], gamma)
    slots = torch.arange(gamma + 1, device=inputs.device)
    values = torch.where(slots < accepted, torch.cat([tokens.gather(0, path), tokens.new_zeros(1)]), next_token)
    sink = sequence.shape[0] - 1
    sequence.index_copy_(0, torch.where(slots <= accepted, length + slots, sink), values)
    start = inputs[-1:]  # the root's slot
    behind = start + 1 + slots[:gamma]
    moved = torch.where(slots[:gamma] < accepted, start + 1 + path, behind)  # the rest stay: past what is kept
    log.copy_(torch.cat([tokens, parents, choices, real.sum()[None], accepted[None]]))
    length.add_(accepted + 1)
    inputs[0].copy_(next_token)
    inputs[-1:].copy_(length - 1)
    return moved, behind


# the loop ---------------------------------------------------------------------------------------------------

class LoopState:
    """The tensors that a loop's graphs read and write (fixed addresses) and its graphs: one lookup graph and
    one verify graph per attention span. Kept in the runner's workspace beside the runner's own graphs (and
    dropped with them when the cache grows). tree: the nodes of a draft tree (0: a chain)."""

    def __init__(self, device: torch.device, capacity: int, gamma: int, tree: int = 0, detail_top: int = 0):
        self.capacity = capacity
        width = tree + 1 if tree else gamma + 1  # the verify pass's positions
        self.sequence = torch.zeros(capacity + gamma + 2, dtype=torch.long, device=device)  # last entry: a sink
        self.length = torch.zeros(1, dtype=torch.long, device=device)
        self.inputs = torch.zeros(width + 1, dtype=torch.long, device=device)  # the verify pass's: ids, start
        self.draft_length = torch.zeros((), dtype=torch.long, device=device)
        self.log = torch.zeros(3 * tree + 3 if tree else 2 * gamma + 3, dtype=torch.long, device=device)
        # step_detail's row (detail_top: its top tokens a position; 0: no detail)
        self.detail = torch.zeros(width * (2 * detail_top + 1) - 1 if detail_top else 0, device=device)
        # what step_detail reads: the verify pass's logits, drafts and the rows that score them, as the verify
        # graph leaves them ("kept") and as the detail graph copies them aside ("taken"); made by the first
        # verify step, which runs before any capture
        self.kept: list[torch.Tensor] | None = None
        self.taken: list[torch.Tensor] | None = None
        self.chain_rows = torch.arange(gamma, device=device)  # a chain's drafts are scored at rows 0..gamma-1
        if tree:  # the tree's layout (tree_lookup writes it)
            self.depths = torch.zeros(width, dtype=torch.long, device=device)
            self.visible = torch.eye(width, dtype=torch.bool, device=device)
            self.visible[:, 0] = True
            self.parents = torch.full((tree,), -1, dtype=torch.long, device=device)
            self.real = torch.zeros(tree, dtype=torch.bool, device=device)
        self.lookup_graph: torch.cuda.CUDAGraph | None = None
        self.verify_graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.take_graph: torch.cuda.CUDAGraph | None = None  # kept -> taken
        self.detail_graph: torch.cuda.CUDAGraph | None = None  # taken -> detail
        # the detail graphs' own memory pool: graphs in one pool may reuse each other's temporaries, which is
        # safe only for graphs that never run at once, and these run beside the verify graphs
        self.pool = None

    def keep(self, logits: torch.Tensor, tokens: torch.Tensor, rows: torch.Tensor) -> None:
        """Copies what step_detail reads into `kept` (made on the first call, with `taken`, its copy's place)."""
        if self.kept is None:
            self.kept = [torch.empty_like(t) for t in (logits, tokens, rows)]
            self.taken = [torch.empty_like(t) for t in (logits, tokens, rows)]
        for mine, given in zip(self.kept, (logits, tokens, rows)):
            mine.copy_(given)

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
    choices: list[int]  # the target's argmax after each draft prefix [len(draft_ids) + 1]
    n_accepted: int
    draft_ms: float
    verify_ms: float
    tree_size: int = 0  # a tree's nodes (draft_ids: the line shown, as the host loop's _verify_tree shows it)
    detail: "StepDetail | None" = None  # with detail: the target's figures along draft_ids


@dataclass
class StepDetail:
    """The target's figures of a step along the drafts shown, as the host loop's records hold them."""
    p_drafts: list[float]  # the target's probability of each draft token
    tops: list[TopTokens]  # the target's most probable tokens before each draft token and after the last


class DeviceLoop:
    """One run's steps on the device (the module's docstring). lookup: the proposer's drafting on the device
    (Proposer.device_lookup; its gamma 0 for plain decoding, its tree the draft tree's nodes, 0 for chains)."""

    def __init__(self, runner, lookup: DeviceLookup, detail_top: int = 0, detail_stream: bool = True):
        self.runner, self.lookup = runner, lookup
        self.gamma, self.tree = lookup.gamma, lookup.tree
        self.detail_top = detail_top  # with detail: the top tokens kept a position (0: none)
        self.width = self.tree + 1 if self.tree else self.gamma + 1  # the verify pass's positions
        # how far past a run's tokens the steps launched ahead reach: one more step in flight (gamma + 1 tokens)
        # and a verify pass's own positions, with a step's worth to spare
        self.ahead = 2 * (self.gamma + 1) + self.width
        self.device = runner.device
        self.graphs = runner.use_graphs
        # the detail graph's stream, and the event the next verify pass waits for (the kept logits taken)
        self._side = torch.cuda.Stream(self.device) if self.graphs and detail_top and detail_stream else None
        self._taken: torch.cuda.Event | None = None
        compiled = self.graphs and runner.use_compile
        self._advance = compiled_static(advance) if compiled else advance
        self._tree_lookup = compiled_static(tree_lookup) if compiled else tree_lookup
        self._advance_tree = compiled_static(advance_tree) if compiled else advance_tree

    @classmethod
    def for_run(cls, runner, proposer, settings, detail_top: int, prompt_length: int,
                options: EngineOptions | None = None) -> "DeviceLoop | None":
        """The loop for this run where it applies: greedy, the fast path with graphs (or options.device_loop
        "force"), a proposer with a device lookup (plain, ngram, retrieval), and room in the context for a step
        launched ahead. detail_top: the top tokens a position the records show (the app's), 0 for records
        without detail (the bench's). options: EngineOptions (None: from the environment)."""
        options = options or EngineOptions.from_environment()
        wanted = options.device_loop
        if wanted == "0" or not settings.greedy:
            return None
        if not isinstance(runner, StaticRunner) or not (runner.use_graphs or wanted == "force"):
            return None
        lookup = proposer.device_lookup(settings, runner)
        if lookup is None or (lookup.tree and not runner.supports_tree):
            return None
        loop = cls(runner, lookup, detail_top, options.detail_stream)
        if prompt_length + settings.max_new_tokens + loop.ahead + loop.gamma + 1 > runner.context_length:
            return None
        return loop

    # what the graphs run --------------------------------------------------------------------------------
    def _lookup_step(self, state: LoopState) -> None:
        if self.tree:
            self._tree_lookup(self.lookup.candidates(state.sequence, state.length), self.tree, state.inputs,
                              state.depths, state.visible, state.parents, state.real)
            return
        draft, length = self.lookup.draft(state.sequence, state.length)
        state.inputs[1:self.gamma + 1].copy_(draft)
        state.draft_length.copy_(length)

    def _verify_step(self, state: LoopState, span: int) -> None:
        # the logits in the model's dtype: the argmax of bfloat16 values is that of their float32 copies
        tree = (state.depths, state.visible) if self.tree else (None, None)
        logits, _ = self.runner.decode(state.inputs[:self.width], state.inputs[-1:], span, False, *tree,
                                       float_logits=False)
        if self.detail_top:  # before acceptance moves the inputs on
            parent_rows = state.parents + 1 if self.tree else state.chain_rows  # a tree's root: parent -1, row 0
            state.keep(logits, state.inputs[1:self.width], parent_rows)
        if not self.tree:
            self._advance(logits, state.sequence, state.length, state.inputs, state.draft_length, state.log)
            return
        moved, behind = self._advance_tree(logits, state.sequence, state.length, state.inputs, state.depths,
                                           state.visible, state.parents, state.real, state.log, self.gamma)
        # the accepted nodes' keys and values (every layer's) moved next to the root's, as runner.keep_nodes
        # does; outside compiled code, which might copy the whole cache to write into it
        self.runner.move_slots(moved, behind)

    @staticmethod
    def _take_step(state: LoopState) -> None:
        for mine, kept in zip(state.taken, state.kept):
            mine.copy_(kept)

    def _detail_step(self, state: LoopState) -> None:
        state.detail.copy_(step_detail(*state.taken, self.detail_top))

    # state and graphs -----------------------------------------------------------------------------------
    def _state(self) -> LoopState:
        space = self.runner.workspace
        key = ("device-loop", *self.lookup.key(), self.detail_top)
        state = space.users.get(key)
        if state is None or state.capacity != space.capacity:
            state = space.users[key] = LoopState(self.device, space.capacity, self.gamma, self.tree, self.detail_top)
        return state

    def _capture(self, state: LoopState, span: int) -> None:
        space = self.runner.workspace
        if self._side is not None:  # a capture runs the verify step, which overwrites what the detail reads
            torch.cuda.current_stream(self.device).wait_stream(self._side)
        if self.gamma and state.lookup_graph is None:
            graph = torch.cuda.CUDAGraph()
            capture_graph(graph, lambda: self._lookup_step(state), self.device, space)  # idempotent
            state.lookup_graph = graph
        # a verify step moves the state on: it runs three times while captured, and is put back after
        saved = [tensor.clone() for tensor in (state.sequence, state.length, state.inputs)]
        graph = torch.cuda.CUDAGraph()
        capture_graph(graph, lambda: self._verify_step(state, span), self.device, space)
        for tensor, value in zip((state.sequence, state.length, state.inputs), saved):
            tensor.copy_(value)
        state.verify_graphs[span] = graph
        if self.detail_top and state.detail_graph is None:  # after a verify step has kept what they read
            state.take_graph, state.detail_graph = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
            capture_graph(state.take_graph, lambda: self._take_step(state), self.device, state)
            capture_graph(state.detail_graph, lambda: self._detail_step(state), self.device, state)

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
    def steps(self, sequence: torch.Tensor, max_new_tokens: int):
        """Yields a StepOutcome a step, read one step behind the device. sequence [T]: on the runner's device;
        the runner's cache must hold sequence[:-1] (the engine's prefill). No step is launched once those in
        flight give max_new_tokens; to stop earlier (an EOS), stop pulling: the step in flight is then computed
        and dropped (the caller's clock waits for it)."""
        self.reserve(sequence.shape[0] + max_new_tokens)
        state = self._state()
        state.start(sequence)
        self._taken = None
        produced, step, in_flight = 0, 0, deque()  # produced: tokens of the steps read so far
        most = max_new_tokens + 1  # every step adds a token: never reached
        rows = torch.empty((most, state.log.shape[0]), dtype=torch.long, pin_memory=self.graphs)
        details = torch.empty((most, state.detail.shape[0]), pin_memory=self.graphs)
        while True:
            enough = produced + len(in_flight) >= max_new_tokens  # what is in flight adds a token a step at least
            if len(in_flight) < 2 and not enough and step < most:  # two in flight: the GPU never waits for the host
                # the step in flight may add gamma + 1 tokens; the span covers what the new one writes
                span = graph_span(sequence.shape[0] + produced + self.ahead, self.runner.context_length)
                in_flight.append((step, self._launch(state, span, rows[step], details[step])))
                step += 1
                continue
            if not in_flight:
                return
            done, events = in_flight.popleft()
            outcome = self._read(events, rows[done], details[done])
            produced += outcome.n_accepted + 1
            yield outcome

    def _launch(self, state: LoopState, span: int, row: torch.Tensor, detail: torch.Tensor):
        if not self.graphs:  # eagerly, a step at a time
            if self.gamma:
                self._lookup_step(state)
            self._verify_step(state, span)
            if self.detail_top:
                self._take_step(state)
                self._detail_step(state)
            row.copy_(state.log)
            detail.copy_(state.detail)
            return None
        if span not in state.verify_graphs:
            self._capture(state, span)
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        events[0].record()
        if state.lookup_graph is not None:
            state.lookup_graph.replay()
        events[1].record()
        if self._taken is not None:  # the previous step's detail has copied the logits this pass overwrites
            torch.cuda.current_stream(self.device).wait_event(self._taken)
        state.verify_graphs[span].replay()
        row.copy_(state.log, non_blocking=True)
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

    def _read(self, events, row: torch.Tensor, detail: torch.Tensor) -> StepOutcome:
        draft_ms = verify_ms = 0.0
        if events is not None:
            for event in events[2:]:  # the step's log, then its detail (when it has one)
                event.synchronize()
            draft_ms, verify_ms = events[0].elapsed_time(events[1]), events[1].elapsed_time(events[2])
        values, gamma = row.tolist(), self.gamma
        if self.tree:
            outcome, line = self._tree_outcome(values, draft_ms, verify_ms)
        else:
            length, accepted = values[2 * gamma + 1], values[2 * gamma + 2]
            outcome, line = StepOutcome(draft_ids=values[:length], choices=values[gamma:gamma + length + 1],
                                        n_accepted=accepted, draft_ms=draft_ms, verify_ms=verify_ms), range(length)
        if self.detail_top:
            probs, ids, drafted = read_detail(detail.tolist(), self.width, self.detail_top)
            rows = [0] + [node + 1 for node in line]  # the rows before each token shown, and after the last
            outcome.detail = StepDetail(p_drafts=[drafted[node] for node in line],
                                        tops=[TopTokens(ids=ids[r], probs=probs[r]) for r in rows])
        return outcome

    def _tree_outcome(self, values: list[int], draft_ms: float, verify_ms: float) -> tuple[StepOutcome, list[int]]:
        """A tree step's log, shown as the host loop's _verify_tree shows it: the accepted path, then the
        drafter's favourite line below where it stopped, with the target's choice before each."""
        budget = self.tree
        count, accepted = values[3 * budget + 1], values[3 * budget + 2]
        tokens, parents = values[:count], values[budget:budget + count]
        choices = values[2 * budget:2 * budget + count + 1]
        path = trees.walk_greedy(tokens, parents, choices).path
        if len(path) != accepted:
            raise RuntimeError(f"the device accepted {accepted} tree nodes where the host's walk accepts {len(path)}")
        line = path + trees.first_child_chain(parents, path[-1] if path else -1)
        outcome = StepOutcome(draft_ids=[tokens[node] for node in line],
                              choices=[choices[row] for row in [0] + [node + 1 for node in line]],
                              n_accepted=accepted, draft_ms=draft_ms, verify_ms=verify_ms,
                              tree_size=0 if trees.is_chain(parents) else count)  # as the host loop counts it
        return outcome, line
