"""The device loop (device_loop.py): its lookups give the host proposers' drafts, and its runs give the host
loop's output and steps. Run here on the CPU, eagerly (SPECVIZ_DEVICE_LOOP=force); the CUDA tests in
test_runners.py run it through graphs."""
import random
from pathlib import Path

import pytest
import torch

from specviz.engine import device_acceptance, device_loop
from specviz.rule import tree_device
from specviz.proposers import ngram_device, retrieval_device
from specviz.api import encode, make_proposer, run_once
from specviz.proposers.datastore import Datastore
from specviz.proposers import NgramProposer, RetrievalProposer
from specviz.settings import DecodeSettings
from specviz.rule.tree import _preorder, ancestor_masks, depths, heaviest_line, weighted_trie

STORE = Path(__file__).resolve().parents[1] / "assets" / "drafters" / "smollm2-135m-instruct" / "retrieval"


def _as_rows(candidates, width, rng):
    tokens = torch.tensor([c + [rng.randrange(3)] * (width - len(c)) for c, _ in candidates], dtype=torch.long)
    valid = torch.tensor([[i < len(c) for i in range(width)] for c, _ in candidates])
    return tokens, valid, torch.tensor([w for _, w in candidates], dtype=torch.float64)


def test_heaviest_line_on_the_device_is_the_hosts_ties_included():
    """Few distinct tokens and few distinct weights: many ties, which both must break the same way."""
    rng = random.Random(0)
    for _ in range(1500):
        width = rng.randrange(1, 7)
        candidates = [([rng.randrange(3) for _ in range(rng.randrange(0, width + 1))],
                       float(rng.choice([1, 4, 16, 100])))
                      for _ in range(rng.randrange(1, 12))]
        line, length = tree_device.heaviest_line(*_as_rows(candidates, width, rng))
        assert line[:int(length)].tolist() == heaviest_line(candidates, width)
        assert not line[int(length):].any()


def _laid_out_as_the_host(node_tokens, parents, real):
    """weighted_tree's nodes (best first) in tree.py's preorder, as weighted_trie lays them out."""
    count = int(real.sum())
    tokens, parents = node_tokens[:count].tolist(), parents[:count].tolist()
    kids = {}
    for node, parent in enumerate(parents):
        kids.setdefault(parent, []).append(node)
    return _preorder(tokens, parents, kids)


def test_draft_trees_on_the_device_are_the_hosts_ties_included():
    rng = random.Random(2)
    for _ in range(1500):
        width, budget = rng.randrange(1, 7), rng.randrange(1, 20)
        candidates = [([rng.randrange(3) for _ in range(rng.randrange(0, width + 1))],
                       float(rng.choice([1, 4, 16, 100])))
                      for _ in range(rng.randrange(1, 12))]
        node_tokens, parents, node_depths, real, ancestors = tree_device.weighted_tree(
            *_as_rows(candidates, width, rng), budget)
        assert _laid_out_as_the_host(node_tokens, parents, real) == weighted_trie(candidates, budget)
        count = int(real.sum())
        assert node_depths[:count].tolist() == depths(parents[:count].tolist())
        masks = ancestor_masks(parents[:count].tolist())  # row b + 1: bit a + 1 set iff a is b or above it
        expected = [[bool(masks[b + 1] >> (a + 1) & 1) for a in range(count)] for b in range(count)]
        assert ancestors[:count, :count].tolist() == expected
        assert not node_tokens[count:].any() and torch.equal(ancestors[count:, count:],
                                                             torch.eye(budget - count, dtype=torch.bool))


@pytest.fixture(scope="module")
def store():
    return Datastore.load(STORE, 49152)


def _sequences(store, count=160):
    """Stretches of the datastore's own text (some with a repeat, so that the sequence matches itself) and
    sequences of a 5-token alphabet (many matches of every size)."""
    rng, text = random.Random(1), store.tokens[:200_000].tolist()
    for trial in range(count):
        if trial % 2:
            yield [rng.randrange(5) for _ in range(rng.randrange(1, 80))]
        else:
            begin = rng.randrange(0, 190_000)
            sequence = [t if t < store.vocab_size else 2 for t in text[begin:begin + rng.randrange(1, 300)]]
            yield sequence + sequence[:rng.randrange(0, 20)]


def test_lookups_on_the_device_are_the_host_proposers_drafts(store):
    on_device, generator = retrieval_device.device_datastore(store, torch.device("cpu")), torch.Generator()
    checked = 0
    for number, sequence in enumerate(_sequences(store)):
        gamma = (1, 4, 16)[number % 3]
        buffer = torch.zeros(512, dtype=torch.long)
        buffer[:len(sequence)] = torch.tensor(sequence)
        length, tokens = torch.tensor([len(sequence)]), torch.tensor(sequence)
        for proposer in (NgramProposer(), RetrievalProposer(store)):
            proposer.reset(tokens, DecodeSettings(gamma=gamma), generator)
            expected = proposer.propose(tokens, gamma).token_ids.tolist()
            if isinstance(proposer, RetrievalProposer):
                draft, size = retrieval_device.retrieval_draft(buffer, length, gamma, (3, 2, 1), on_device, 32, 1.0)
            else:
                draft, size = ngram_device.ngram_draft(buffer, length, gamma, (3, 2, 1))
            assert draft[:int(size)].tolist() == expected, (type(proposer).__name__, sequence, gamma)
            checked += bool(expected)
    assert checked > 200  # most lookups found something


def test_tree_lookups_on_the_device_are_the_host_proposers_trees(store):
    on_device, generator = retrieval_device.device_datastore(store, torch.device("cpu")), torch.Generator()
    checked = 0
    for number, sequence in enumerate(_sequences(store, 60)):
        gamma, budget = (4, 16)[number % 2], (15, 63)[number % 3 > 0]
        buffer = torch.zeros(512, dtype=torch.long)
        buffer[:len(sequence)] = torch.tensor(sequence)
        length, tokens = torch.tensor([len(sequence)]), torch.tensor(sequence)
        settings = DecodeSettings(gamma=gamma, tree=budget)
        for proposer in (NgramProposer(), RetrievalProposer(store)):
            proposer.reset(tokens, settings, generator)
            draft = proposer.propose(tokens, gamma)
            candidates = [ngram_device.own_candidates(buffer, length, gamma, (3, 2, 1))]
            if isinstance(proposer, RetrievalProposer):
                candidates.append(retrieval_device.stored_candidates(buffer, length, gamma, on_device, 32, 1.0))
            tree = tree_device.weighted_tree(*(torch.cat(parts) for parts in zip(*candidates)), budget)
            expected = (draft.token_ids.tolist(), draft.parents or [])
            assert _laid_out_as_the_host(tree[0], tree[1], tree[3]) == expected, (type(proposer).__name__, sequence)
            checked += len(expected[0]) > 1
    assert checked > 50


def test_walk_tree_matches_the_hosts_greedy_walk():
    from specviz.rule.tree import walk_greedy

    rng = random.Random(3)
    for _ in range(300):
        budget, gamma = rng.randrange(1, 16), rng.randrange(1, 6)
        candidates = [([rng.randrange(3) for _ in range(rng.randrange(0, gamma + 1))], 1.0)
                      for _ in range(rng.randrange(1, 10))]
        node_tokens, parents, node_depths, real, ancestors = tree_device.weighted_tree(
            *_as_rows(candidates, gamma, rng), budget)
        choices = torch.tensor([rng.randrange(3) for _ in range(budget + 1)])
        logits = torch.nn.functional.one_hot(choices, 3).float()
        _, accepted, path, next_token = tree_device.walk_tree(logits, node_tokens, parents, real, ancestors,
                                                             node_depths, gamma)
        count = int(real.sum())
        walk = walk_greedy(node_tokens[:count].tolist(), parents[:count].tolist(), choices[:count + 1].tolist())
        assert int(accepted) == len(walk.path) and path[:len(walk.path)].tolist() == walk.path
        assert int(next_token) == walk.next_token


def test_accept_greedy_matches_verify_greedy():
    from specviz.rule.verify import verify_greedy

    rng = torch.Generator().manual_seed(0)
    for _ in range(200):
        gamma = int(torch.randint(1, 6, (1,), generator=rng))
        logits = torch.randn(gamma + 1, 5, generator=rng)
        choices = logits.argmax(-1)
        draft = torch.where(torch.rand(gamma, generator=rng) < 0.7, choices[:gamma],
                            torch.randint(0, 5, (gamma,), generator=rng))
        length = int(torch.randint(0, gamma + 1, (1,), generator=rng))
        _, accepted, next_token = device_acceptance.accept_greedy(logits, draft, torch.tensor(length))
        verdict = verify_greedy(draft[:length], logits[:length + 1])
        assert (int(accepted), int(next_token)) == (verdict.n_accepted, verdict.next_token)


PROMPTS = ["Write a short poem about the sea, then repeat its first line.",
           "List the numbers from 1 to 20 separated by commas."]


@pytest.mark.parametrize("method,gamma,tree", [("plain", 1, 0), ("ngram", 8, 0), ("retrieval", 8, 0), ("ngram", 6, 15),
                                               ("retrieval", 8, 31)])
def test_device_loop_runs_give_the_host_loops_output_and_steps(default_target, monkeypatch, method, gamma, tree):
    """Same output token for token, and step by step the same drafts (a tree's: the same line shown, the same
    size) and acceptances, until the host loop shortens its drafts to the tokens still wanted (the device
    loop does not)."""
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma, tree=tree)
    for prompt in PROMPTS:
        ids = encode(default_target, prompt)
        runs = {}
        for mode in ("0", "force"):
            monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
            runs[mode] = run_once(default_target, make_proposer(method, default_target), ids, settings, detail=False)
        host, device = runs["0"], runs["force"]
        assert (host.settings["loop"], device.settings["loop"]) == ("host", "device")
        assert device.token_ids == host.token_ids and len(device.token_ids) == 40
        compared = 0
        for host_step, device_step in zip(host.steps, device.steps):
            if settings.max_new_tokens - (host_step.total_emitted - host_step.emitted) - 1 < gamma:
                break  # the host loop drafted less from here on
            assert [p.token_id for p in device_step.positions] == [p.token_id for p in host_step.positions]
            assert device_step.n_accepted == host_step.n_accepted
            assert device_step.tree_size == host_step.tree_size
            assert [t.kind for t in device_step.tokens] == [t.kind for t in host_step.tokens]
            compared += 1
        assert compared >= len(host.steps) // 2
        if method != "plain":
            assert host.metrics.accepted > 0  # the drafts were really checked against something
        if tree:
            assert any(step.tree_size for step in device.steps)


@pytest.fixture(scope="module")
def distilled(default_target):
    from specviz.proposers.checkpoints import load_draft_model

    return load_draft_model("distilled", default_target)


MODEL_DRAFTERS = [("eagle", 6, 0, 0.0), ("eagle", 4, 15, 0.0), ("medusa", 4, 0, 0.0), ("medusa", 4, 31, 0.0),
                  ("draft", 4, 0, 0.5)]


@pytest.mark.parametrize("method,gamma,tree,stop", MODEL_DRAFTERS,
                         ids=[f"{m}-{g}-{t}{'-stop' if s else ''}" for m, g, t, s in MODEL_DRAFTERS])
def test_drafters_that_are_models_draft_on_the_device_as_on_the_host(default_target, distilled, monkeypatch, method,
                                                                      gamma, tree, stop):
    """EAGLE (chains and trees), Medusa and the distilled draft model with its draft stop (early-exit drafts through
    the same code as the draft model) on the device loop: the host loop's output, and step by step its drafts (ended
    where the host's draft stop ends them), acceptances and tree sizes, until the host loop shortens its drafts near the
    token limit."""
    settings = DecodeSettings(max_new_tokens=24, gamma=gamma, tree=tree, draft_stop=stop)
    ids = encode(default_target, PROMPTS[0])
    runs = {}
    for mode in ("0", "force"):
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
        runs[mode] = run_once(default_target, make_proposer(method, default_target, distilled), ids, settings,
                              detail=False)
    host, device = runs["0"], runs["force"]
    assert (host.settings["loop"], device.settings["loop"]) == ("host", "device")
    assert device.token_ids == host.token_ids
    compared = 0
    for host_step, device_step in zip(host.steps, device.steps):
        if settings.max_new_tokens - (host_step.total_emitted - host_step.emitted) - 1 < gamma:
            break
        assert [p.token_id for p in device_step.positions] == [p.token_id for p in host_step.positions]
        assert (device_step.n_accepted, device_step.tree_size, device_step.doubted) == \
            (host_step.n_accepted, host_step.tree_size, host_step.doubted)
        compared += 1
    assert compared >= len(host.steps) // 2 and host.metrics.accepted > 0
    if stop:  # the stop ended drafts early
        assert any(step.doubted and len(step.positions) < gamma for step in device.steps)
    if tree:
        assert any(step.tree_size for step in device.steps)


def detailed_runs_on_both_loops(target, monkeypatch, method, settings, device_mode):
    """(host loop, device loop) runs of PROMPTS[1] with detail (the app's records): checked to have run on
    those loops and to give the same output."""
    ids = encode(target, PROMPTS[1])
    runs = {}
    for mode in ("0", device_mode):
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", mode)
        runs[mode] = run_once(target, make_proposer(method, target), ids, settings, detail=True)
    host, device = runs["0"], runs[device_mode]
    assert (host.settings["loop"], device.settings["loop"]) == ("host", "device")
    assert device.token_ids == host.token_ids and device.text == host.text
    return host, device


def drafted_in_full(host, device, settings):
    """The (host step, device step) pairs until the host loop drafts less than gamma near the token limit
    (the device loop does not)."""
    for host_step, device_step in zip(host.steps, device.steps):
        if settings.max_new_tokens - (host_step.total_emitted - host_step.emitted) - 1 < settings.gamma:
            return
        yield host_step, device_step


@pytest.mark.parametrize("method,gamma,tree",
                         [("plain", 1, 0), ("ngram", 8, 0), ("retrieval", 8, 31), ("medusa", 4, 31)])
def test_device_loop_records_with_detail_are_the_host_loops(default_target, monkeypatch, method, gamma, tree):
    """With detail (the app's records), the device loop's steps show what the host loop's show: the same token
    texts and kinds, the target's probability of each draft, its top tokens at every position and where the
    next token came from (a tree's: along the line shown)."""
    settings = DecodeSettings(max_new_tokens=40, gamma=gamma, tree=tree)
    host, device = detailed_runs_on_both_loops(default_target, monkeypatch, method, settings, "force")
    compared = 0
    for host_step, device_step in drafted_in_full(host, device, settings):
        for mine, theirs in zip(device_step.positions, host_step.positions, strict=True):
            assert (mine.token_id, mine.text, mine.accepted, mine.reached, mine.q) == \
                (theirs.token_id, theirs.text, theirs.accepted, theirs.reached, theirs.q)
            assert mine.p == pytest.approx(theirs.p, abs=1e-5) and mine.accept_prob == theirs.accept_prob
            assert mine.p_top.ids[:5] == theirs.p_top.ids[:5]
            assert mine.p_top.probs == pytest.approx(theirs.p_top.probs, abs=1e-5)
        assert [(t.id, t.text, t.kind) for t in device_step.tokens] == [(t.id, t.text, t.kind)
                                                                        for t in host_step.tokens]
        assert device_step.next_top.ids[:5] == host_step.next_top.ids[:5]
        assert device_step.next_token.p == pytest.approx(host_step.next_token.p, abs=1e-5)
        compared += 1
    assert compared >= len(host.steps) // 2
    # not lean records (NaN, empty top lists)
    assert all(0 < step.next_token.p <= 1 and len(step.next_top.ids) == 20 for step in device.steps)
    shown = [p for step in device.steps for p in step.positions]
    assert all(0 < p.p <= 1 and len(p.p_top.ids) == 20 for p in shown)
    if method != "plain":
        assert any(p.accepted for p in shown) and any(not p.accepted for p in shown)


@pytest.mark.parametrize("method,gamma", [("eagle", 4), ("medusa", 3)])
def test_device_loop_records_show_a_model_drafters_q_as_the_host_loops(default_target, monkeypatch, method, gamma):
    """With detail, a model drafter's chain on the device loop shows what the host loop shows of it: its
    probability of each draft token and its top tokens at each, beside the target's."""
    settings = DecodeSettings(max_new_tokens=24, gamma=gamma)
    host, device = detailed_runs_on_both_loops(default_target, monkeypatch, method, settings, "force")
    compared = 0
    for host_step, device_step in drafted_in_full(host, device, settings):
        for mine, theirs in zip(device_step.positions, host_step.positions, strict=True):
            assert (mine.token_id, mine.accepted) == (theirs.token_id, theirs.accepted)
            assert mine.q == pytest.approx(theirs.q, abs=1e-5) and mine.p == pytest.approx(theirs.p, abs=1e-5)
            assert mine.q_top.ids[:5] == theirs.q_top.ids[:5]
            assert mine.q_top.probs == pytest.approx(theirs.q_top.probs, abs=1e-5)
        compared += 1
    assert compared >= len(host.steps) // 2
    assert all(0 < p.q <= 1 and len(p.q_top.ids) == 20 for step in device.steps for p in step.positions)


def sampled_detailed_run(target, method, settings, verifier=None):
    """A sampled run of PROMPTS[1] with detail on the device loop (the caller forces it), checked to have run
    there; verifier: a planted host verifier the device loop stands in for (wrong_verifiers.ON_DEVICE)."""
    from specviz.engine.run import SpeculativeRun

    run = SpeculativeRun(target, make_proposer(method, target), encode(target, PROMPTS[1]), settings, detail=True,
                         verifier=verifier)
    for _ in run:
        pass
    assert run.result.settings["loop"] == "device"
    return run.result


@torch.inference_mode()
def disagreements(target, result, settings, warp=True) -> list[str]:
    """Where a sampled run's detailed records disagree with the target's own distributions, recomputed by a
    forward over each step's context and the line it shows (warped as the run's settings say; warp=False: the
    plain softmax, the control): each draft's p and the top tokens before it, the next token's p, and where
    the next token was drawn from (after the whole line: p; after a rejection: the residual, in which a lookup's
    rejected token has no mass and a model drafter's q is taken off p)."""
    from specviz.rule.sampling import warp_probs

    found, prompt = [], encode(target, PROMPTS[1])
    for step in result.steps:
        if step.next_token not in step.tokens:
            continue  # cut by the token limit: the next token is not part of the output
        start = step.total_emitted - step.emitted
        context = prompt + result.token_ids[:start]
        line = [position.token_id for position in step.positions]
        logits = (
            target.model(torch.tensor([context + line], device=target.model.device))
            .logits[0, len(context) - 1 :]
            .float()
        )
        p = warp_probs(logits, settings) if warp else logits.softmax(-1)
        for i, position in enumerate(step.positions):
            if abs(position.p - float(p[i, position.token_id])) > 1e-4:
                found.append(f"step {step.index} draft {i}: p {position.p:.4f}, the target's "
                             f"{float(p[i, position.token_id]):.4f}")
            if position.p_top.probs != pytest.approx(p[i].topk(20).values.tolist(), abs=1e-4):
                found.append(f"step {step.index} draft {i}: top tokens")
            if position.q is not None and position.reached:
                wanted = min(1.0, position.p / position.q) if position.q > 0 else 1.0
                if abs(position.accept_prob - wanted) > 1e-4:
                    found.append(f"step {step.index} draft {i}: acceptance {position.accept_prob:.4f} for min(1, p/q) "
                                 f"{wanted:.4f}")
        n, drawn = step.n_accepted, step.next_top
        if abs(step.next_token.p - float(p[n, step.next_token.id])) > 1e-4:
            found.append(f"step {step.index}: next token's p {step.next_token.p:.4f}, the target's "
                         f"{float(p[n, step.next_token.id]):.4f}")
        if n == len(line):  # the whole line accepted: drawn from p after it
            if drawn.probs != pytest.approx(p[n].topk(20).values.tolist(), abs=1e-4):
                found.append(f"step {step.index}: after the whole line, not drawn from p")
            continue
        q_top = step.positions[n].q_top
        q_of = {line[n]: 1.0} if q_top is None else dict(zip(q_top.ids, q_top.probs))  # a lookup's q: one-hot
        residual = {x: max(0.0, float(p[n, x]) - q_of[x]) for x in drawn.ids if x in q_of}
        residual.update({x: float(p[n, x]) for x in drawn.ids if x not in q_of and q_top is None})
        anchor = max(residual, key=residual.get, default=None)
        if anchor is None or residual[anchor] <= 0:
            continue
        scale = dict(zip(drawn.ids, drawn.probs))[anchor] / residual[anchor]
        for x, left in residual.items():
            if abs(dict(zip(drawn.ids, drawn.probs))[x] - scale * left) > 1e-3:
                found.append(f"step {step.index}: after a rejection, token {x} drawn with "
                             f"{dict(zip(drawn.ids, drawn.probs))[x]:.4f}, the residual's {scale * left:.4f}")
    return found


# warped away from the softmax, and hot enough that drafts the target gives some mass are rejected (a residual
# then differs from p)
SAMPLED_DETAIL = [("ngram", DecodeSettings(max_new_tokens=32, gamma=6, temperature=1.0, top_k=50, seed=2)),
                  ("eagle", DecodeSettings(max_new_tokens=32, gamma=4, temperature=0.8, top_k=20, seed=3)),
                  ("retrieval", DecodeSettings(max_new_tokens=32, gamma=4, tree=15, temperature=0.9, seed=4))]


@pytest.mark.parametrize("method,settings", SAMPLED_DETAIL, ids=["ngram-chain-top-k", "eagle-chain-top-k",
                                                                 "retrieval-tree-temperature"])
def test_sampled_records_with_detail_on_the_device_loop_show_the_targets_warped_distributions(
        default_target, monkeypatch, method, settings):
    """A sampled run's detailed records from the device loop (the app's, on a GPU) show the target's distributions
    as the run warped them, and where each next token was drawn from. Host and device loops draw differently,
    so the records are checked against a forward of the target's own, not against the host loop's. Controls: the
    unwarped softmax disagrees with the same records, and so do the records of a verifier that draws from p
    after a rejection instead of the residual."""
    from specviz.rule.wrong_verifiers import verify_sampled_without_residual

    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    result = sampled_detailed_run(default_target, method, settings)
    shown = [position for step in result.steps for position in step.positions]
    assert any(p.accepted for p in shown) and any(p.reached and not p.accepted for p in shown)
    if method == "eagle":
        assert all(0 < p.q <= 1 and len(p.q_top.ids) == 20 for p in shown)
    if method == "retrieval":
        assert any(step.tree_size for step in result.steps)
    assert disagreements(default_target, result, settings) == []
    assert disagreements(default_target, result, settings, warp=False)  # the control: the records are warped
    planted = sampled_detailed_run(default_target, method, settings, verifier=verify_sampled_without_residual)
    assert any("after a rejection" in line for line in disagreements(default_target, planted, settings))


def test_device_loop_stops_at_eos(default_target, monkeypatch):
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    ids = encode(default_target, "Say just the word yes.")
    result = run_once(default_target, make_proposer("retrieval", default_target), ids,
                      DecodeSettings(max_new_tokens=64, gamma=4), detail=False)
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "0")
    plain = run_once(default_target, make_proposer("plain", default_target), ids,
                     DecodeSettings(max_new_tokens=64), detail=False)
    assert result.settings["loop"] == "device"
    assert plain.stop_reason == "eos" and result.stop_reason == "eos"
    assert result.token_ids == plain.token_ids


def test_device_loop_only_where_it_applies(default_target, monkeypatch):
    """The host loop for what the device loop does not do (adaptive), and on a CPU unless forced. Sampled runs,
    Medusa's trees, and detailed records (greedy and sampled) of lookups and of drafters that are models run in
    it."""
    ids = encode(default_target, PROMPTS[0])
    short = DecodeSettings(max_new_tokens=4, gamma=4)

    def loop_of(method="ngram", settings=short, detail=False):
        return run_once(default_target, make_proposer(method, default_target), ids, settings,
                        detail=detail).settings["loop"]

    assert loop_of() == "host"  # a CPU runner has no graphs
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "force")
    assert loop_of() == "device"
    assert loop_of(detail=True) == "device"
    sampled = DecodeSettings(max_new_tokens=4, gamma=4, temperature=0.7, seed=1)
    assert loop_of(settings=sampled) == "device"
    assert loop_of(settings=sampled, detail=True) == "device"
    assert loop_of(settings=DecodeSettings(max_new_tokens=4, gamma=4, tree=8)) == "device"
    assert loop_of("retrieval", settings=DecodeSettings(max_new_tokens=4, gamma=4, tree=8)) == "device"
    assert loop_of("early-exit") == "device" and loop_of("early-exit", detail=True) == "device"
    assert loop_of("medusa") == "device" and loop_of("medusa",
                                                     settings=DecodeSettings(max_new_tokens=4, tree=8)) == "device"
    assert loop_of("adaptive") == "host"


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("method,tree,detail_top", [("ngram", 0, 0), ("retrieval", 0, 0), ("ngram", 15, 0),
                                                    ("retrieval", 63, 0), ("ngram", 0, 20), ("retrieval", 31, 20)])
def test_a_device_loop_step_never_waits_for_the_host(method, tree, detail_top):
    """What a graph captures must not read anything back: run a step's functions eagerly with CUDA's sync
    check set to fail on any read-back."""
    from specviz import load_model
    from specviz.runners.static import make_runner

    target = load_model("default", device="cuda", dtype="float32")
    runner = make_runner(target.model, compile=False)
    loop = device_loop.DeviceLoop.for_run(runner, make_proposer(method, target), DecodeSettings(gamma=8, tree=tree),
                                          detail_top, 10)
    loop.reserve(64)
    state = loop._state()
    state.start(torch.tensor([1, 2, 3, 1, 2, 3, 1, 2], device="cuda"))
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        loop._lookup_step(state, 128)
        loop._verify_step(state, 128)
        if detail_top:  # the detail graph's two steps
            loop._take_step(state)
            loop._detail_step(state)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    if tree:  # the path: at least "3 1 2" (what followed "1 2" before), if the target agrees
        assert state.log[-2].item() >= 3 and state.length.item() == 8 + state.log[-1].item() + 1
    else:
        assert state.log[-2].item() >= 3  # the draft: at least "3 1 2", which followed "1 2" before


@cuda
def test_device_loop_through_graphs_gives_the_host_loops_output_in_float32(default_target, monkeypatch):
    """On a GPU the loop runs by default, as graphs; float32: the host loop's output exactly, GPU-timed steps."""
    from specviz import load_model

    target = load_model("default", device="cuda", dtype="float32")
    for method, tree in (("plain", 0), ("ngram", 0), ("retrieval", 0), ("ngram", 31), ("retrieval", 63)):
        settings = DecodeSettings(max_new_tokens=96, gamma=16, tree=tree)
        for prompt in PROMPTS:
            ids = encode(target, prompt)
            monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "1")
            device = run_once(target, make_proposer(method, target), ids, settings, detail=False)
            monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "0")
            host = run_once(target, make_proposer(method, target), ids, settings, detail=False)
            assert (device.settings["loop"], host.settings["loop"]) == ("device", "host")
            assert device.token_ids == host.token_ids
            assert device.metrics.verify_seconds > 0
            assert [s.n_accepted for s in device.steps][:-2] == [s.n_accepted for s in host.steps][:-2]


@cuda
def test_device_loop_records_with_detail_through_graphs_are_the_host_loops_in_float32(monkeypatch):
    """The app's records on a GPU come from the device loop's graphs: the host loop's tokens, texts and figures."""
    from specviz import load_model

    target = load_model("default", device="cuda", dtype="float32")
    for method, tree in (("plain", 0), ("ngram", 0), ("retrieval", 31)):
        settings = DecodeSettings(max_new_tokens=64, gamma=8, tree=tree)
        host, device = detailed_runs_on_both_loops(target, monkeypatch, method, settings, "1")
        for theirs, mine in drafted_in_full(host, device, settings):
            assert [(t.id, t.text, t.kind) for t in mine.tokens] == [(t.id, t.text, t.kind) for t in theirs.tokens]
            assert [p.p for p in mine.positions] == pytest.approx([p.p for p in theirs.positions], abs=1e-4)
            assert mine.next_top.ids[:3] == theirs.next_top.ids[:3]


@cuda
@pytest.mark.parametrize("method,settings", SAMPLED_DETAIL, ids=["ngram-chain-top-k", "eagle-chain-top-k",
                                                                 "retrieval-tree-temperature"])
def test_sampled_records_with_detail_through_graphs_show_the_targets_warped_distributions(monkeypatch, method,
                                                                                          settings):
    """On a GPU, through graphs with the detail on its second stream: the sampled records agree with the target's
    own forward, as eagerly on the CPU."""
    from specviz import load_model

    target = load_model("default", device="cuda", dtype="float32")
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "1")
    result = sampled_detailed_run(target, method, settings)
    assert result.metrics.verify_seconds > 0
    assert disagreements(target, result, settings) == []
    assert disagreements(target, result, settings, warp=False)


@cuda
@pytest.mark.parametrize("method,tree,temperature,detail_top", [
    ("eagle", 0, 0.0, 0), ("eagle", 15, 0.0, 0), ("medusa", 0, 0.0, 0), ("medusa", 31, 1.0, 0), ("draft", 0, 0.0, 0),
    ("eagle", 0, 1.0, 0),
    ("eagle", 15, 1.0, 0), ("draft", 0, 0.8, 0), ("retrieval", 31, 1.0, 0), ("plain", 0, 1.0, 0), ("eagle", 0, 0.0, 20),
    ("draft", 0, 0.0, 20), ("eagle", 0, 1.0, 20), ("retrieval", 31, 1.0, 20)])
def test_a_drafter_that_is_a_model_never_waits_for_the_host_in_a_step(method, tree, temperature, detail_top):
    """Drafters that are models, sampled steps and a model drafter's detail: a step's functions run eagerly with
    CUDA's sync check set to fail on any read-back, the drafter first reading a prompt."""
    from specviz import load_model
    from specviz.proposers.checkpoints import load_draft_model
    from specviz.runners.static import make_runner

    target = load_model("default", device="cuda", dtype="float32")
    draft = load_draft_model("distilled", target) if method == "draft" else None
    runner = make_runner(target.model, compile=False)
    settings = DecodeSettings(gamma=4, tree=tree, temperature=temperature, top_k=50 if temperature else 0,
                              draft_stop=0.5)
    loop = device_loop.DeviceLoop.for_run(runner, make_proposer(method, target, draft), settings, detail_top, 10)
    loop.reserve(64)
    state = loop._state()
    prompt = torch.tensor([1, 2, 3, 1, 2, 3, 1, 2], device="cuda")
    runner.reset()
    _, hidden = runner.forward(prompt[:-1], logits_for="none")
    state.start(prompt)
    if loop.sampled:
        state.warp.set(settings)
        state.generator.manual_seed(0)
    loop.lookup.start(prompt, hidden)

    def step():
        if loop.gamma:
            loop._lookup_step(state, 128)
        loop._verify_step(state, 128)
        if detail_top:
            loop._take_step(state)
            loop._detail_step(state)

    step()  # kernels compiled and tuned first (Triton's, cuBLAS's)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            step()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert state.length.item() >= 8 + 4


@cuda
def test_drafters_that_are_models_through_graphs_give_the_host_loops_output_in_float32(monkeypatch):
    """On a GPU the loop runs them as graphs (compiled): float32, the host loop's output exactly."""
    from specviz import load_model
    from specviz.proposers.checkpoints import load_draft_model

    target = load_model("default", device="cuda", dtype="float32")
    draft = load_draft_model("distilled", target)
    for method, gamma, tree, stop in MODEL_DRAFTERS[:4]:
        settings = DecodeSettings(max_new_tokens=64, gamma=gamma, tree=tree, draft_stop=stop)
        ids = encode(target, PROMPTS[0])
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "1")
        device = run_once(target, make_proposer(method, target, draft), ids, settings, detail=False)
        monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "0")
        host = run_once(target, make_proposer(method, target, draft), ids, settings, detail=False)
        assert (device.settings["loop"], host.settings["loop"]) == ("device", "host"), method
        assert device.token_ids == host.token_ids, (method, gamma, tree)
        assert device.metrics.draft_seconds > 0 and device.metrics.verify_seconds > 0


@cuda
def test_a_seed_reproduces_a_sampled_run_through_graphs(monkeypatch):
    from specviz import load_model

    target = load_model("default", device="cuda", dtype="bfloat16")
    ids = encode(target, PROMPTS[0])
    monkeypatch.setenv("SPECVIZ_DEVICE_LOOP", "1")
    # top-k and top-p too: their graphs sort the vocabulary, where Inductor on a GPU has failed and sent runs to
    # the host loop; Medusa's compiled drafting warps its heads' scores with them
    for method, tree, top_k, top_p in (("eagle", 15, 0, 1.0), ("retrieval", 0, 0, 1.0), ("eagle", 15, 20, 1.0),
                                       ("ngram", 0, 0, 0.9), ("medusa", 0, 0, 0.9)):
        runs = [run_once(target, make_proposer(method, target), ids,
                         DecodeSettings(max_new_tokens=48, gamma=4, tree=tree, temperature=1.0, top_k=top_k,
                                        top_p=top_p, seed=seed), detail=False) for seed in (3, 3, 4)]
        assert all(run.settings["loop"] == "device" for run in runs)
        assert runs[0].token_ids == runs[1].token_ids != runs[2].token_ids
