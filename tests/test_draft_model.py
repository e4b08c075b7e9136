"""The `draft` method's drafter (proposers/draft_model.py): a greedy chain queued on the device drafts what the
token-by-token chain drafts, with and without the draft stop."""
import pytest

from specviz import DecodeSettings
from specviz.api import encode, make_proposer, run_once
from specviz.proposers.checkpoints import load_draft_model, shipped_drafter_exists

PROMPT = "List three uses of a hash map, then explain which one matters most in a compiler and why."


def drafts_of(run) -> list[tuple[list[int], bool, int]]:
    return [([p.token_id for p in s.positions], s.doubted, s.n_accepted) for s in run.steps]


@pytest.mark.parametrize("draft_stop", [0.0, 0.5])
def test_a_greedy_chain_queued_on_the_device_drafts_what_the_chain_read_token_by_token_drafts(default_target,
                                                                                             draft_stop):
    if not shipped_drafter_exists("distilled", default_target):
        pytest.skip("no distilled draft model ships in assets/drafters")
    draft = load_draft_model("distilled", default_target)
    settings = DecodeSettings(max_new_tokens=24, gamma=4, draft_stop=draft_stop)
    prompt = encode(default_target, PROMPT)
    runs = {}
    for queued in (False, True):  # a CPU reads for free, so the queued chain is forced here
        proposer = make_proposer("draft", default_target, draft)
        proposer.chain_on_device = queued
        runs[queued] = run_once(default_target, proposer, prompt, settings, PROMPT)
    assert drafts_of(runs[True]) == drafts_of(runs[False])
    assert runs[True].token_ids == runs[False].token_ids
    doubted = [s.doubted for s in runs[True].steps]
    assert any(doubted) == (draft_stop > 0)  # with the stop, some chains were cut, and cut alike
    q = runs[True].steps[0].positions[0].q  # the drafter's own probability of its token, shown as before
    assert q is not None and 0 < q <= 1
