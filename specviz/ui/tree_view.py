"""A step's draft tree drawn as SVG from its record (StepRecord.tree): every candidate the verifier got in one
forward, the accepted path lit, each node with its token, the target's p and the drafter's q. Pure: records in,
HTML out (tests/test_tree_view.py). Colours come from the page's stylesheet (assets/specviz.css, .sv-tree), so
that the light and the dark theme both read; the drawing scrolls inside its own box on a narrow screen."""
from __future__ import annotations

from ..records.schema import StepRecord, TreeNode
from ..records.tree_layout import place
from .render import escape_text

COLUMN = 80  # px a leaf column takes at full size: a token and "p 0.42 · q 1" fit
ROW = 58  # px from one depth to the next
BOX_W, BOX_H = 72, 38
MAX_TEXT = 7  # characters of a token shown in its box (the whole token is in the node's title)


def _short(text: str) -> str:
    shown = text.replace("\n", "⏎").replace(" ", "·") or "∅"
    return shown if len(shown) <= MAX_TEXT else shown[:MAX_TEXT - 1] + "…"


def _figure(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _state(node: TreeNode) -> str:
    if node.on_path:
        return "accepted"
    return "rejected" if node.tried else "untried"


def node_title(node: TreeNode) -> str:
    """What a node's tip says (its title: hover, or a long press on a phone)."""
    what = {"accepted": "on the accepted path", "rejected": "judged and rejected",
            "untried": "never judged: the walk took another branch above it"}[_state(node)]
    q = "one-hot (tree candidates are verified as drafted tokens)" if node.q is None else f"{node.q:.3f}"
    return f"{node.text or node.token_id!r}: {what}; p = {_figure(node.p)}, q = {q}"


def tree_svg(step: StepRecord) -> str:
    """The step's tree as an <svg> in a scrolling box; "" for a chain step (no tree)."""
    if not step.tree:
        return ""
    placed, columns = place([node.parent for node in step.tree])
    depth = max(p.depth for p in placed)
    width, height = max(columns, 1) * COLUMN, (depth + 1) * ROW
    x = {p.node: (p.column + 0.5) * COLUMN for p in placed}
    y = {p.node: p.depth * ROW + BOX_H / 2 for p in placed}
    tops = [p.column for p in placed if p.depth == 1]
    root = ((sum(tops) / len(tops) + 0.5) * COLUMN, BOX_H / 2 - 4)  # over the middle of its children
    edges, boxes = [], []
    for i, node in enumerate(step.tree):
        px, py = root if node.parent < 0 else (x[node.parent], y[node.parent])
        edges.append(f'<line class="sv-tree-edge{" sv-tree-lit" if node.on_path else ""}" x1="{px:.0f}" '
                     f'y1="{py + BOX_H / 2:.0f}" x2="{x[i]:.0f}" y2="{y[i] - BOX_H / 2:.0f}"/>')
        left, top = x[i] - BOX_W / 2, y[i] - BOX_H / 2
        boxes.append(f'<g class="sv-tree-node sv-tree-{_state(node)}" tabindex="0">'
                     f'<title>{escape_text(node_title(node))}</title>'
                     f'<rect x="{left:.0f}" y="{top:.0f}" width="{BOX_W}" height="{BOX_H}" rx="5"/>'
                     f'<text x="{x[i]:.0f}" '
                     f'y="{top + 15:.0f}">{escape_text(_short(node.text or str(node.token_id)))}</text>'
                     f'<text class="sv-tree-pq" x="{x[i]:.0f}" y="{top + 31:.0f}">p {_figure(node.p)} · q '
                     f'{"1" if node.q is None else _figure(node.q)}</text></g>')
    accepted = sum(node.on_path for node in step.tree)
    label = (f"step {step.index}: a draft tree of {len(step.tree)} candidates, {accepted} accepted along one path; "
             "p: the target's probability of the token, q: the drafter's (1: a drafted candidate)")
    root_mark = (f'<circle class="sv-tree-root" cx="{root[0]:.0f}" cy="{root[1]:.0f}" r="5"/>')
    # spans, not divs: the drawing sits inside a step's lane, itself a span
    return (f'<span class="sv-tree" role="img" aria-label="{escape_text(label)}">'
            f'<svg viewBox="0 -4 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}" '
            f'xmlns="http://www.w3.org/2000/svg">{root_mark}{"".join(edges)}{"".join(boxes)}</svg>'
            f'<span class="sv-tree-caption">{escape_text(label)}</span></span>')
