"""The proposer interface: every drafting method proposes up to gamma tokens for the target to verify."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .. import methods as registry
from ..rule.sampling import draw, warp_probs
from ..settings import DecodeSettings

if TYPE_CHECKING:
    from ..models.loading import LoadedModel
    from ..options import EngineOptions


@dataclass
class Draft:
    token_ids: torch.Tensor  # [g] (g may be 0: nothing to propose this step)
    probs: torch.Tensor | None  # [g, V]: q, the distributions the tokens were drawn from; None = one-hot
    logits: torch.Tensor | None = None  # [g, V]: the drafter's raw logits, for display (softmax when greedy)
    parents: list[int] | None = None  # a draft tree (tree.py): each token's parent, -1 = the last accepted
    # token; None = a chain. Tree drafts are verified as one-hot candidates: probs and logits are None.
    doubted: bool = False  # the drafter ended the chain after its last token, which it doubted (draft_stop)
    key: object = None  # what kind of draft it is, where the drafter can say (n-gram lookup: the matched n-gram's
    # size): `adaptive` keeps an acceptance rate per key

    @property
    def size(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass
class Feedback:
    """What the engine tells the proposer after verifying a step."""

    tokens: torch.Tensor  # [T] the whole accepted sequence now (prompt + output, incl. the new last token)
    drafted: int
    n_accepted: int
    draft_seconds: float
    verify_seconds: float
    target_hidden: torch.Tensor | None  # [n_accepted + 1, H]: target hidden states at the positions fed in this
    # verify pass that were kept (the previous last token and the accepted drafts), for needs_target_hidden
    new_ids: list[int] | None = None  # the tokens this step appended to `tokens` (accepted drafts, then the
    # resampled or bonus token), on the host: proposers that mirror the sequence need no device transfer


class DeviceLookup:
    """A proposer's drafting as tensor functions that a CUDA graph can hold, for the device loop
    (device_loop.py): they read the sequence on the device (its first `length` [1] entries) and never read a
    value back to the host. This base drafts nothing: plain decoding.

    A drafter that is a model keeps tensors of its own on the device (its cache): workspace() makes them once
    per loop state, and use() hands them to each run's lookup, so that the graphs captured over them serve
    every run. It reads the prompt before the first step (start()) and, in the verify pass's graph, what the
    target computed for the tokens it kept (observe())."""

    gamma = 0  # draft tokens a step (a chain's length, a tree's depth)
    tree = 0  # a draft tree's nodes; 0: chains
    has_q = False  # sampled chains come with q, the distributions they were drawn from (a model's); else one-hot
    stops = False  # a chain may end early where the drafter doubts its token (settings.draft_stop)
    min_prompt = 1  # prompt tokens a run needs (a model drafter reads the prompt but its last token first)
    scratch = 0  # cache slots past the sequence that drafting writes in its own cache (a model's)

    def key(self) -> tuple:
        """What the loop's captured graphs depend on besides the runner."""
        return ("plain",)

    def workspace(self, device: torch.device, capacity: int):
        """The drafter's own device tensors for sequences of up to `capacity` tokens (None: it needs none)."""
        return None

    def use(self, space) -> None:
        """This run drafts over `space` (what workspace() made, kept with the loop's graphs)."""
        self.space = space

    def start(self, sequence: torch.Tensor, hidden: torch.Tensor | None) -> None:
        """Before the first step, outside any graph: sequence [T], the prompt; hidden [T - 1, H], the target's
        hidden states over all of it but its last token (the prefill's)."""

    def draft(self, sequence: torch.Tensor, length: torch.Tensor, span: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A greedy chain: (its tokens [gamma], zeros past its end; its length []). span: the attention span of
        this step's graph (a model drafter attends over its cache up to it)."""
        raise NotImplementedError

    def draft_shown(self, sequence, length, span: int):
        """draft() with what the app shows of the drafter: (tokens, length, its distribution at each position [gamma,
        V], the softmax of its logits, or None: a lookup has none)."""
        return (*self.draft(sequence, length, span), None)

    def sample(self, sequence, length, span: int, warp, generator: torch.Generator):
        """A sampled chain (warp: sampling.DeviceWarp, the run's): (tokens [gamma], length [], q [gamma, V] or
        None where the draft is deterministic, a one-hot q). A lookup drafts as when greedy."""
        return (*self.draft(sequence, length, span), None)

    def candidates(self, sequence: torch.Tensor, length: torch.Tensor) -> tuple:
        """A tree's candidates: sets of (tokens [M, gamma], valid [M, gamma], weights [M]), merged into a
        weighted trie by draft_tree()."""
        raise NotImplementedError

    def draft_tree(self, sequence: torch.Tensor, length: torch.Tensor, span: int) -> tuple:
        """A draft tree of `tree` nodes (greedy and sampled alike: trees are verified as one-hot candidates):
        (tokens, parents, depths, real [B], ancestors [B, B]) as tree_device.weighted_tree gives them."""
        from ..rule.tree_device import candidates_tree

        return candidates_tree(self.candidates(sequence, length), self.tree)

    def observe(self, hidden: torch.Tensor, rows: torch.Tensor, accepted: torch.Tensor) -> None:
        """After a verify pass, inside its graph: hidden [W, H], the pass's hidden states; rows [gamma + 1], the
        rows of the positions kept (the last token before the step, then the accepted drafts: the first
        accepted + 1 are real); accepted []. Lookups read nothing."""


class Declared:
    """A flag a method declares once, in its registry entry (specviz.methods), read by the proposer's name; a
    subclass of another name (a test's variant of n-gram lookup) reads its nearest registered base's, and a
    proposer of no registered method has `default`. An instance may set its own (adaptive takes its base's as it
    is built)."""

    def __init__(self, field: str, default: bool):
        self.field, self.default = field, default

    def __set_name__(self, owner, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, proposer, cls):
        if proposer is not None and self.attribute in proposer.__dict__:
            return proposer.__dict__[self.attribute]
        entries = {entry.name: entry for entry in registry.methods()}
        for klass in cls.__mro__:
            entry = entries.get(klass.__dict__.get("name"))
            if entry is not None:
                return getattr(entry, self.field)
        return self.default

    def __set__(self, proposer, value) -> None:
        proposer.__dict__[self.attribute] = value


class Proposer:
    """Base class of every drafting method. The engine calls, of each proposer:

    - reset() once a run, propose() and observe() once a step, release() when the run ends (subclasses
      implement propose(); they keep their own state, such as caches, in step with the accepted sequence);
    - runners(): the runners it drafts with, and warm_up(): graphs of its own, both for api.warm_up to prepare
      before anything is timed;
    - device_lookup(): its drafting as tensor functions for the device loop, where it has that.

    The flags below say what the engine and `adaptive` may count on; nothing else is read from a proposer."""

    name = "proposer"  # a registered method's name: its flags below are that entry's
    drafts = Declared("drafts", True)  # False for plain decoding, which never proposes anything
    needs_target_hidden = False  # True for drafters that read the target's hidden states (Medusa, EAGLE)
    drafts_trees = Declared("drafts_trees", False)  # drafters that propose a draft tree when settings.tree > 0
    # a draft costs next to nothing whatever its length (n-gram lookup, the entry's `lookup`): the adaptive method
    # then looks at the whole draft before choosing how much of it to verify
    free_drafts = Declared("lookup", False)
    drafts_on_host = False  # True when propose() and observe() launch no work on the device (lookups, plain):
    # the engine then times a step without waiting for the device in between
    target_layers: tuple[int, ...] | None = None  # with needs_target_hidden: the target's layers whose outputs it
    # reads, side by side (DFlash's), which the run's runner hands over as its hidden states; None: the final ones
    settings: DecodeSettings | None = None  # the run's, from reset()
    generator: torch.Generator | None = None

    def reset(self, prompt_ids: torch.Tensor, settings: DecodeSettings, generator: torch.Generator,
              target_hidden: torch.Tensor | None = None) -> None:
        """Called once at the start of a run. target_hidden [T - 1, H]: the target's hidden states over the
        prompt but its last token (the prefill), given to proposers that set needs_target_hidden."""
        self.settings = settings
        self.generator = generator

    def propose(self, tokens: torch.Tensor, gamma: int) -> Draft:
        """tokens [T]: the accepted sequence so far. Returns up to gamma draft tokens that follow it."""
        raise NotImplementedError

    def observe(self, feedback: Feedback) -> None:
        """Called after every verification."""

    def runners(self) -> list:
        """The runners it drafts with (a draft model's), whose graphs api.warm_up captures before timing."""
        return []

    def warm_up(self, max_length: int, gamma: int, tree: int) -> None:
        """Untimed preparation for runs of up to max_length tokens with these settings (api.warm_up calls it):
        graphs to capture, code to compile, other than its runners'. Most proposers have none."""

    def device_lookup(self, settings: DecodeSettings, runner) -> DeviceLookup | None:
        """This proposer's drafting on the device, for the device loop, or None where it has none (then the
        host loop runs). runner: the fast path's runner the loop verifies on (its device, use_graphs,
        use_compile)."""
        return None

    def release(self) -> None:
        """Called when a run ends: give back what the run held (a tree drafter's static cache); the next
        reset() takes what it needs again."""

    def choose(self, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
        """A drafter's logits [V] -> (its draft token, q [V]): the argmax when greedy, else a draw from q."""
        probs = warp_probs(logits, self.settings)
        token = int(logits.argmax()) if self.settings.greedy else int(draw(probs, self.generator))
        return token, probs

    def tree_budget(self) -> int:
        """Draft tokens a tree may hold this run (settings.tree; the engine sets it to 0 where the runner
        cannot verify trees); 0 means draft a chain."""
        return self.settings.tree if self.settings is not None else 0

    def empty_draft(self, device) -> Draft:
        return Draft(torch.empty(0, dtype=torch.long, device=device), None)


@dataclass(frozen=True)
class ProposerRequest:
    """What a method's builder (specviz.methods.Method.build, e.g. proposers.ngram.build) builds its proposer
    from: api.make_proposer's arguments. draft: the draft model (for the methods that use one); heads: a trained
    drafter's folder or a datastore's (None: the one shipped for the target); another(name): the proposer of
    another method with the same request (what `adaptive` drafts through)."""

    target: LoadedModel
    draft: LoadedModel | None
    exit_layer: int | None
    heads: str | None
    adaptive_base: str
    adaptive_lookup: str
    options: EngineOptions
    another: Callable[[str], Proposer]
