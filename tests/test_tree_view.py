"""The draft tree drawn from a step's record: every node placed without overlap, the accepted path lit, each node
with its token, p and q, text escaped; a chain draws nothing. Records built by hand: no model."""
import re

import pytest

from specviz.records.schema import StepRecord, TokenKind, TokenRecord, TopTokens, TreeNode
from specviz.records.tree_layout import place
from specviz.ui import render
from specviz.ui.tree_view import tree_svg

pytestmark = pytest.mark.quick


def step_with(tree):
    token = TokenRecord(id=9, text="x", kind=TokenKind.RESAMPLED, step=3)
    return StepRecord(index=3, gamma=2, positions=[], n_accepted=sum(n.on_path for n in tree), next_token=token,
                      next_top=TopTokens([], []), tokens=[token], draft_ms=0.0, verify_ms=1.0, elapsed_s=0.1,
                      emitted=1, total_emitted=1, tree_size=len(tree), tree=tree)


# root -> 0 " the" (accepted) -> {2 " cat" (rejected), 3 " dog" (not judged)}; root -> 1 " a" (rejected)
TREE = [TreeNode(5, -1, True, True, 0.61, None, " the"), TreeNode(6, -1, False, True, 0.2, None, " a"),
        TreeNode(7, 0, False, True, 0.05, None, " cat"), TreeNode(8, 0, False, False, 0.01, None, "<b>&")]


def test_nodes_are_placed_by_depth_with_a_parent_over_its_children():
    placed, columns = place([n.parent for n in TREE])
    assert columns == 3  # three leaves: 1, 2, 3
    by = {p.node: p for p in placed}
    assert [by[i].depth for i in range(4)] == [1, 1, 2, 2]
    assert by[0].column == (by[2].column + by[3].column) / 2  # over the middle of its children
    spots = {(p.column, p.depth) for p in placed}
    assert len(spots) == len(placed)  # no two nodes in one place
    assert place([-1, 0, 1, 2])[1] == 1  # the control: a chain is one column


def test_the_drawing_lights_the_accepted_path_and_shows_p_and_q_of_every_node():
    html = tree_svg(step_with(TREE))
    assert html.count('class="sv-tree-node') == 4
    assert html.count("sv-tree-accepted") == 1 and html.count("sv-tree-rejected") == 2
    assert html.count("sv-tree-untried") == 1
    assert html.count('class="sv-tree-edge sv-tree-lit"') == 1  # the one edge on the accepted path
    assert "p 0.61 · q 1" in html and "p 0.05 · q 1" in html
    assert "<b>" not in html and "&lt;b&gt;&amp;" in html  # a token's text is escaped, never markup
    assert "4 candidates, 1 accepted along one path" in html
    width = int(re.search(r'<svg viewBox="0 -4 (\d+) ', html).group(1))
    assert width == 3 * 80  # one column a leaf: wider trees scroll in their own box rather than shrink


def test_a_chain_step_draws_no_tree_and_a_tree_step_s_lane_holds_its_drawing():
    assert tree_svg(step_with([])) == ""  # the control: nothing drawn for a chain
    groups = render.StepGroups()
    groups.add([TokenRecord(id=9, text="x", kind=TokenKind.RESAMPLED, step=3)], tree_svg(step_with(TREE)))
    lane = groups.html()
    assert lane.startswith('<span class="sv-step" data-step="3">') and '<span class="sv-tree"' in lane
    assert groups.html(current_step=3).count('<span class="sv-tree"') == 1  # the highlighted step keeps its tree
