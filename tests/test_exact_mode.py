"""The exact mode's parts that run without a GPU (runners/exact.py): paths through a draft tree, the padding, the
switch, and what a run claims. The kernels themselves: tests/test_exact_mode_cuda.py."""
import pytest
import torch

from specviz.engine.run import exact_forward
from specviz.options import EngineOptions
from specviz.runners.exact import WIDTH, chain_paths, pad_rows, tree_paths
from specviz.settings import DecodeSettings
from specviz.rule.tree import depths as tree_depths
from specviz.rule.tree import unpack_visibility, visibility_words

pytestmark = pytest.mark.quick


def tree_inputs(parents: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(depths, visibility) of a root and its tree, as the runner builds them."""
    depths = torch.tensor([0, *tree_depths(parents)])
    return depths, unpack_visibility(visibility_words(parents), len(parents) + 1)


def test_a_tree_node_s_path_lists_its_ancestors_in_depth_order():
    #        root(0)
    #       /   |   \
    #      1    2    6
    #      |    |
    #      3    4
    #      |
    #      5
    parents = [-1, -1, 0, 1, 2, -1]  # nodes 1..6 (rows 1..6); -1: the root
    depths, visible = tree_inputs(parents)
    paths = tree_paths(depths, visible)
    expected = {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3], 4: [0, 2, 4], 5: [0, 1, 3, 5], 6: [0, 6]}
    for row, path in expected.items():
        assert paths[row, :len(path)].tolist() == path, row
        assert int(depths[row]) == len(path) - 1


def test_a_chain_s_paths_are_the_chain_itself():
    chain = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    assert torch.equal(tree_paths(torch.arange(5), chain), chain_paths(5, "cpu").masked_fill(~chain, 0))
    assert chain_paths(3, "cpu").tolist() == [[0, 1, 2]] * 3


def test_siblings_paths_differ_where_their_branches_do():
    """The control: two nodes at one depth on other branches do not share a path."""
    depths, visible = tree_inputs([-1, -1, 0, 1])
    paths = tree_paths(depths, visible)
    assert paths[3, :3].tolist() == [0, 1, 3] and paths[4, :3].tolist() == [0, 2, 4]


def test_padding_appends_zero_rows_and_keeps_the_real_ones():
    x = torch.arange(6.0).view(3, 2)
    padded = pad_rows(x, 5)
    assert padded.shape == (5, 2) and torch.equal(padded[:3], x) and not padded[3:].any()
    assert pad_rows(x, 3) is x


def test_the_switch_is_on_unless_the_environment_turns_it_off():
    assert EngineOptions().exact and EngineOptions.from_environment({}).exact
    assert not EngineOptions.from_environment({"SPECVIZ_EXACT": "0"}).exact


class Runner:
    def __init__(self, exact_width: int):
        self.exact_width = exact_width


@pytest.mark.parametrize("gamma, tree, covered", [(4, 0, True), (WIDTH - 1, 0, True), (WIDTH, 0, False),
                                                   (6, WIDTH - 1, True), (6, 63, False)])
def test_a_run_claims_the_mode_only_where_its_widest_verify_pass_fits(gamma, tree, covered):
    settings = DecodeSettings(gamma=gamma, tree=tree)
    assert exact_forward(Runner(WIDTH), settings) is covered
    assert exact_forward(Runner(0), settings) is False  # the mode off, or a CPU: never claimed


def test_a_cpu_runner_says_why_it_runs_without_the_mode(tiny_target):
    from specviz.runners.static import StaticRunner

    runner = StaticRunner(tiny_target.model)
    assert not runner.exact and "CUDA" in runner.exact_reason
    assert "off" in StaticRunner(tiny_target.model, exact=False).exact_reason
