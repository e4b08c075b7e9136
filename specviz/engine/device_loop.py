"""The device loop: plain decoding and every drafter that offers device drafting (`ngram`, `retrieval`, `eagle`,
`medusa`, the draft model and `early-exit`; chains and draft trees), greedy or sampled, with every step's work
on the GPU.

Why: on a GPU a small target's verify pass is short, and the host loop (engine/run.py) spends a good part of a
step on the host while the GPU waits: reading the verdict, looking up the next draft, launching the next pass
(docs/fast-path.md has the measurements). Here a step is two CUDA graphs that read and write only device
tensors:

1. the lookup: the proposer's own drafting on the device (Proposer.device_lookup: for `ngram` the sequence's
   n-gram matches, proposers/ngram_device.py; for `retrieval` also the datastore's continuations, merged into
   the weighted trie's heaviest line, proposers/retrieval_device.py; for the drafters that are models their
   forwards over a cache of their own, proposers/eagle_device.py, medusa_device.py, draft_model_device.py)
   written into the verify pass's input;
2. the verify pass (the fast path's forward, runners.static.StaticRunner.decode) and acceptance (greedy, or
   speculative sampling: device_acceptance.py): the accepted tokens appended to the sequence on the device, the
   next pass's first token and position set, and what the target computed for them handed to the drafter
   (DeviceLookup.observe: EAGLE's features, Medusa's hidden state).

Sampled runs draw from a generator of the loop's own, registered with its graphs and seeded from the run's seed
before the first step: a seed reproduces a run. Temperature, top-k and top-p are tensors the graphs read
(sampling.DeviceWarp): one graph serves every setting.

With a draft tree (`--tree N`), the lookup writes the weighted trie's N best nodes (tree_device.weighted_tree,
the trees tree.weighted_trie makes) with their depths and visibility; the verify pass walks the tree greedily
(tree_device.walk_tree) and moves the accepted path's keys and values next to the root's, as StaticRunner.keep_nodes
does.

The host only replays them and reads each step's log (device_outcome.py) one step behind, while the GPU runs the
next step: the GPU never waits for the host. The run stops on the host's reading (max_new_tokens, EOS): the step
already launched then is computed and dropped (its time is counted). The graphs' tensors are a LoopState
(device_state.py).

With detail (the app's runs), the verify graph also keeps its logits and drafts, and a third graph computes from
them what the app shows of each step (device_detail.py), read back with the step's log. That graph runs on a
second stream (EngineOptions.detail_stream), beside the next step's lookup and verify pass: a top-k over the
vocabulary is a noticeable part of a small target's step, and its small kernels leave most of the card idle
(docs/fast-path.md has the figures). It first copies the kept logits aside, so that the next verify pass waits
only for that copy before it overwrites them.

Exactly the drafts of the host proposers (tests compare them step by step), and the host loop's acceptance (the
output is plain greedy output, or has the target's distribution; tests check it against the exact distribution,
with controls that must fail). The same functions run eagerly on a CPU (the tests), without graphs.
"""
from __future__ import annotations

from collections import deque

import torch

from ..options import EngineOptions
from ..proposers.base import DeviceLookup
from ..runners.graphs import MIN_SPAN, capture_graph, compiled_static, graph_span
from ..runners.static import StaticRunner
from ..rule.sampling import DeviceWarp, exponential_noise
from .device_acceptance import (advance, advance_sampled, advance_sampled_lean, advance_tree, advance_tree_sampled,
                                advance_tree_sampled_lean, write_tree)
from .device_detail import detail_of, step_detail
from .device_outcome import StepOutcome, chain_outcome, tree_outcome
from .device_state import LoopState


class DeviceLoop:
    """One run's steps on the device (the module's docstring). lookup: the proposer's drafting on the device
    (Proposer.device_lookup; its gamma 0 for plain decoding, its tree the draft tree's nodes, 0 for chains).
    settings: the run's (sampled when its temperature is above 0); residual=False: the sampled verifier's
    control that resamples from p (wrong_verifiers.ON_DEVICE)."""

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
        # Inductor's compile of it is not reliable on a GPU, and a failed one would send such runs to the host loop
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
        bench's). residual=False: the sampled verifier's control (wrong_verifiers.ON_DEVICE). options:
        EngineOptions (None: from the environment)."""
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
        (the caller's clock waits for it). On a CPU, where every step runs to its end as it is launched, one step
        is in flight: a step launched ahead would overlap nothing, and the last one of a run would be computed
        only to be dropped (a tenth of a short run's steps)."""
        self.reserve(sequence.shape[0] + max_new_tokens)
        state = self._state()
        state.start(sequence)
        if self.sampled:
            state.warp.set(settings)
            state.generator.manual_seed(seed)
        self.lookup.start(sequence, hidden)
        self._taken = None
        produced, step, in_flight = 0, 0, deque()  # produced: tokens of the steps read so far
        ahead = 1 if self.device.type == "cpu" else 2  # on a GPU two in flight: it never waits for the host
        most = max_new_tokens + 1  # every step adds a token: never reached
        rows = torch.empty((most, state.log.shape[0]), dtype=torch.long, pin_memory=self.graphs)
        values = torch.empty((most, state.values.shape[0]), pin_memory=self.graphs)
        details = torch.empty((most, state.detail.shape[0]), pin_memory=self.graphs)
        while True:
            enough = produced + len(in_flight) >= max_new_tokens  # what is in flight adds a token a step at least
            if len(in_flight) < ahead and not enough and step < most:
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
        figures = values.tolist() if self.sampled else None
        if self.tree:
            outcome, line = tree_outcome(row.tolist(), figures, self.tree, draft_ms, verify_ms)
        else:
            outcome, line = chain_outcome(row.tolist(), figures, self.gamma, draft_ms, verify_ms, self.lookup.stops)
        if self.detail_top:
            outcome.detail = detail_of(detail.tolist(), line, self.detail_top, self.width, self.gamma,
                                       self.lookup.has_q and not self.tree, self.sampled)
        return outcome
