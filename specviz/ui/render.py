"""HTML for the app, built in Python from step records: pure functions, no gradio.

Every piece of prompt, model or token text goes through escape_text(): html.escape, and also `$`, braces and
backticks as character references, so that nothing the model writes can become markup or be evaluated by a
client-side template (gr.HTML templates are JavaScript template literals: docs/design.md, "Pitfalls")."""
from __future__ import annotations

import html
from collections.abc import Collection

from ..records.schema import RunMetrics, TokenKind, TokenRecord
from .view import FirstDifference, Theory, difference_cause

SHOWN_KINDS = (TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.RESAMPLED, TokenKind.BONUS, TokenKind.TARGET)
KIND_HELP = {
    TokenKind.ACCEPTED: "a draft token the target accepted (solid underline)",
    TokenKind.REJECTED: "a draft token the target rejected, not part of the output (struck through)",
    TokenKind.RESAMPLED: "drawn by the target at the first rejection (bold, wavy underline)",
    TokenKind.BONUS: "drawn by the target when every draft token was accepted (double underline)",
    TokenKind.TARGET: "plain decoding: a step with no draft (no mark)",
}
_EXTRA_ESCAPES = str.maketrans({"$": "&#36;", "{": "&#123;", "}": "&#125;", "`": "&#96;"})


def escape_text(text) -> str:
    """Text (from a user, a model or a token) as inert HTML: markup and template syntax shown as characters."""
    return html.escape(str(text), quote=True).translate(_EXTRA_ESCAPES)


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def token_tip(token: TokenRecord, sampling: bool = True, reached: bool = True) -> str:
    """The hover text of one token: kind, step, p, q, min(1, p/q) and the draw u. The page shows it composed
    by the stylesheet from the token's data attributes (assets/specviz.css, "the tip"); this is its text.
    reached=False: a draft after the step's first rejection, which the verifier never tested."""
    lines = [f"{token.kind.value} · step {token.step}"]
    if token.kind in (TokenKind.ACCEPTED, TokenKind.REJECTED):
        q = "one-hot (drafter gives no distribution)" if token.q is None else _number(token.q)
        lines.append(f"p = {_number(token.p)}   q = {q}")
        if not reached:
            lines.append("not tested: it follows the step's first rejection")
        elif sampling:
            lines.append(f"min(1, p/q) = {_number(token.accept_prob)}   u = {_number(token.u)}   "
                         f"(accepted iff u < min(1, p/q))")
        else:
            lines.append("greedy: accepted iff it is the target's most probable token (no draw u)")
    elif token.kind == TokenKind.RESAMPLED and sampling:
        lines.append(f"p = {_number(token.p)}   drawn from the residual max(0, p - q), renormalised")
    elif token.kind == TokenKind.RESAMPLED:
        lines.append(f"p = {_number(token.p)}   the target's most probable token, in place of the rejected draft")
    elif token.kind == TokenKind.BONUS:
        lines.append(f"p = {_number(token.p)}   drawn from p after all drafts were accepted")
    else:
        lines.append(f"p = {_number(token.p)}")
    return "\n".join(lines)


def shown_text(token: TokenRecord) -> str:
    """A token's text with its whitespace visible: a newline as ⏎ (followed by the line break, except in a
    rejected draft, which is not part of the output and stays inline); a token of spaces or tabs only as · and
    ⇥, so that indentation can be seen and hovered."""
    text = token.text
    if text and not text.strip(" \t\n"):
        text = text.replace(" ", "·").replace("\t", "⇥")
    return text.replace("\n", "⏎" if token.kind == TokenKind.REJECTED else "⏎\n")


END_MARK = "∎"  # an end-of-text token in the answer reading mode: a quiet mark, not the token's name


def _content(token: TokenRecord, special: bool) -> str:
    """A token's text as markup for every reading mode: where the marked text (whitespace as ⏎ and ·, a special
    token by its name) differs from the text as it reads, both, in .sv-mark and .sv-plain spans; the stylesheet
    shows the plain one in the answer mode (which reads as text) and the marks in the others."""
    marked = shown_text(token)
    if special:
        plain = f'<span class="sv-plain sv-end" aria-label="end">{END_MARK}</span>'
    elif marked == token.text:
        return escape_text(marked)
    elif token.text.strip(" \t\n"):  # words with newlines: a ⏎ mark before each break
        return escape_text(marked).replace("⏎", '<span class="sv-mark">⏎</span>')
    else:
        plain = f'<span class="sv-plain">{escape_text(token.text)}</span>'
    return f'<span class="sv-mark">{escape_text(marked)}</span>{plain}'


# The page's script that places a token's tip (assets/specviz.css, "the tip") in the window rather than in the
# token view: the view scrolls, so it clips what sticks out of it, and a tip above the first line showed as a
# thin strip under the step sentence. On hover or focus it gives the token the window coordinates of its top
# (or, with no room above, of its bottom) and the class that makes its tip fixed there.
TIP_SCRIPT = """
const svPlaceTip = (event) => {
  const token = event.target.closest ? event.target.closest('.tok') : null;
  if (!token) return;
  const box = token.getBoundingClientRect(), below = box.top < 90;
  token.style.setProperty('--sv-tip-x', Math.max(4, Math.min(box.left, window.innerWidth - 360)) + 'px');
  token.style.setProperty('--sv-tip-y', (below ? box.bottom + 4 : box.top - 4) + 'px');
  token.classList.add('sv-tip-placed');
  token.classList.toggle('sv-tip-below', below);
};
document.addEventListener('pointerover', svPlaceTip, true);
document.addEventListener('focusin', svPlaceTip, true);
"""


def _attribute(name: str, value: float | None) -> str:
    return "" if value is None else f' data-{name}="{_number(value)}"'


def _token_span(token: TokenRecord, current: bool, reached: bool, special: bool = False) -> str:
    """One token as a span whose data attributes hold the numbers of its tip (p, q, min(1, p/q) as a, u); the
    stylesheet composes the tip's sentences from them (token_tip gives the same text), so that the markup a
    streamed update re-sends stays small. A number the token lacks is left out and shown as –. special: a
    special token (end of text, chat markup) whose text is its name."""
    classes = ["tok", f"tok-{token.kind.value}"]
    if not token.text.strip():
        classes.append("tok-ws")
    if not reached:
        classes.append("tok-untested")
    if current:
        classes.append("sv-current")
    numbers = _attribute("p", token.p)
    if token.kind in (TokenKind.ACCEPTED, TokenKind.REJECTED):
        numbers += _attribute("q", token.q) + _attribute("a", token.accept_prob) + _attribute("u", token.u)
    return (f'<span class="{" ".join(classes)}" data-step="{token.step}"{numbers} tabindex="0">'
            f'{_content(token, special)}</span>')


def step_group_html(step: int, tokens: list[TokenRecord], current: bool = False, special: Collection[int] = (),
                    tree: str = "") -> str:
    """One step's tokens as one group (a lane in the steps reading mode): its drafts in order, each accepted or
    rejected, then the target's own token. Drafts after the step's first rejection were never tested. special:
    the ids of special tokens, shown by their names (a quiet end mark in the answer mode). tree: the step's
    draft tree drawn (tree_view.tree_svg), shown in the steps mode only."""
    spans = []
    rejected = 0
    for token in tokens:
        spans.append(_token_span(token, current, reached=token.kind != TokenKind.REJECTED or rejected == 0,
                                 special=token.id in special))
        rejected += token.kind == TokenKind.REJECTED
    return f'<span class="sv-step" data-step="{step}">{"".join(spans)}{tree}</span>'


def _by_step(tokens: list[TokenRecord]) -> list[tuple[int, list[TokenRecord]]]:
    groups: list[tuple[int, list[TokenRecord]]] = []
    for token in tokens:
        if not groups or groups[-1][0] != token.step:
            groups.append((token.step, []))
        groups[-1][1].append(token)
    return groups


def token_spans(tokens: list[TokenRecord], current_step: int | None = None, special: Collection[int] = ()) -> str:
    """The tokens, each step's in one group. Tabbing to a token (or tapping it) shows its tip."""
    return "".join(step_group_html(step, group, step == current_step, special) for step, group in _by_step(tokens))


class StepGroups:
    """The token view's groups of one run, each step's rendered once: a finished step's tokens never change,
    so a streamed update renders only the steps that are new since the last one, and the highlighted step
    again. html() equals token_spans() of the same tokens."""

    def __init__(self, special: Collection[int] = ()):
        self._tokens: list[tuple[int, list[TokenRecord]]] = []
        self._trees: list[str] = []  # each group's drawn draft tree ("" for a chain)
        self._html: list[str] = []
        self._steps = 0
        self.special = frozenset(special)

    def __len__(self) -> int:
        """Steps added so far."""
        return self._steps

    def add(self, step_tokens: list[TokenRecord], tree: str = "") -> None:
        """The next step's tokens (a step with none adds no group), and its drawn draft tree if it had one."""
        self._steps += 1
        for step, group in _by_step(step_tokens):
            self._tokens.append((step, group))
            self._trees.append(tree)
            self._html.append(step_group_html(step, group, special=self.special, tree=tree))

    def html(self, current_step: int | None = None, upto_step: int | None = None) -> str:
        parts = []
        for (step, group), tree, rendered in zip(self._tokens, self._trees, self._html):
            if upto_step is not None and step > upto_step:
                break
            parts.append(step_group_html(step, group, True, self.special, tree) if step == current_step else rendered)
        return "".join(parts)


def token_view_html(tokens: list[TokenRecord], prompt: str = "", header: str = "",
                    current_step: int | None = None, upto_step: int | None = None, sampling: bool = True,
                    story: str = "", spans: str | None = None, special: Collection[int] = ()) -> str:
    """The live token view: a line on the current step, the run's header and prompt, then every shown token
    coloured by kind, with a tip. upto_step hides later steps (replay); current_step highlights one step. The
    reading mode (answer, drafts, steps) is a class on the page, applied by the stylesheet; greedy decoding is
    a class on the output, which words the tips. spans: the tokens already rendered (StepGroups.html()), in
    place of tokens, current_step and upto_step."""
    if spans is None:
        if upto_step is not None:
            tokens = [t for t in tokens if t.step <= upto_step]
        spans = token_spans(tokens, current_step, special)
    story_html = f'<div class="sv-story">{escape_text(story)}</div>' if story else ""
    head = f'<div class="sv-run-header">{escape_text(header)}</div>' if header else ""
    prompt_html = (f'<div class="sv-prompt" title="{escape_text(prompt)}"><span class="sv-label">Prompt</span>'
                   f'{escape_text(prompt)}</div>' if prompt else "")
    body = spans or '<span class="sv-muted">(no tokens yet)</span>'
    output = "sv-output" if sampling else "sv-output sv-greedy"
    return f'<div class="sv-tokens">{story_html}<div class="{output}">{body}</div>{prompt_html}{head}</div>'


def legend_html() -> str:
    items = "".join(
        f'<span class="sv-legend-item"><span class="tok tok-{kind.value}">{kind.value}</span>'
        f'<span class="sv-legend-help">{escape_text(KIND_HELP[kind])}</span></span>'
        for kind in SHOWN_KINDS
    )
    return f'<div class="sv-legend" aria-label="token kinds">{items}</div>'


RUN_STATES = ("none", "loading", "running", "stepping", "paused", "replaying", "done", "stopped")


def status_html(message: str, level: str = "info", run_state: str | None = None) -> str:
    """A one-line status box; level info, ok, warn or error (errors are announced to screen readers). run_state
    (one of RUN_STATES): where the Run tab's run is, which decides the run controls the page shows (the
    stylesheet, from the page's latest status that names one); None leaves them as they are."""
    role = ' role="alert"' if level == "error" else ""
    state = f' data-sv-run="{run_state}"' if run_state in RUN_STATES else ""
    return f'<div class="sv-status sv-{level}"{role}{state}>{escape_text(message)}</div>'


EXPLAIN = {  # one line each, for a reader who has not met the letters
    "alpha": "the share of drafted tokens the target accepted",
    "tau": "tokens written per target forward (plain decoding: 1)",
    "c": "one draft token's cost, in target forwards (lookups: about 0)",
    "speedup": "plain decoding's time over this run's, same prompt, same process",
}


EXACT_NOTE = "the exact mode: each position computed as plain decoding computes it"


def margin_text(margin: float) -> str:
    return "more than 100" if margin > 100 else f"{margin:.2f}" if margin >= 1 else f"{margin:.3f}"


def difference_note(difference: FirstDifference) -> str:
    """One short sentence on a greedy run's first difference from plain: the two tokens, the margin of plain's
    two largest logits there, and whether that is rounding (a near-tie, outside the exact mode) or not."""
    d = difference
    tokens = f"speculative {d.speculative!r}, plain {d.plain!r}"
    apart = "" if d.margin is None else f"plain's top two logits {margin_text(d.margin)} apart"
    cause = difference_cause(d)
    if cause == "exact":
        return (f"{tokens}: both runs in the exact mode, so not rounding: a real difference, worth reporting"
                + (f" ({apart})" if apart else ""))
    if cause == "rounding":
        hint = " (the exact mode avoids it where it applies)" if d.gpu else ""
        return f"{tokens}: {apart}, a near-tie: {d.dtype} rounding, not the method{hint}"
    if cause == "wide":
        return f"{tokens}: {apart}, NOT a near-tie, not rounding: a real difference, worth reporting"
    return f"{tokens}: {apart}" if apart else tokens


NOISY_TILE = "the machine was busy while it was measured: the status line says what does not add up"


def _row(name: str, value: str, note: str = "") -> str:
    note_html = f'<span class="sv-note">{escape_text(note)}</span>' if note else ""
    return (f'<div class="sv-row"><span class="sv-key">{escape_text(name)}</span>'
            f'<span class="sv-val">{escape_text(value)}</span>{note_html}</div>')


def _tile(value: str, name: str, note: str, noisy: bool = False, title: str | None = None) -> str:
    kind = "sv-tile sv-noisy" if noisy else "sv-tile"
    return (f'<div class="{kind}" title="{escape_text(title or note)}"><div class="sv-big">{escape_text(value)}</div>'
            f'<div class="sv-key">{escape_text(name)}</div><div class="sv-note">{escape_text(note)}</div></div>')


def summary_html(metrics: RunMetrics, method: str, plain: RunMetrics | None = None, speedup: float | None = None,
                 identical: bool | None = None, difference: FirstDifference | None = None,
                 sampling: bool = False, idle_seconds: float = 0.0, finished: bool = True,
                 theory: Theory | None = None, noise: str | None = None, bit_for_bit: bool = False,
                 idle_why: str = "") -> str:
    """The measured numbers of a run as a card (speeds on engine time): the four that matter as tiles, each
    with a line that says what it means, then the details, the baseline and the theory beside them. noise: the
    note a speedup that failed its plausibility check carries in place of its meaning (never stated as fact).
    bit_for_bit: both runs' forwards were in the exact mode, so identical output is identical arithmetic."""
    m = metrics
    tiles = []
    if speedup is not None:
        tiles.append(_tile(f"{speedup:.2f}×", "speedup (noisy)" if noise else "speedup",
                           NOISY_TILE if noise else EXPLAIN["speedup"], noisy=bool(noise), title=noise))
    plain_note = f"plain decoding: {_number(plain.tokens_per_second, 1)} tok/s" if plain is not None else "engine time"
    tiles.append(_tile(f"{_number(m.tokens_per_second, 1)} tok/s", f"{method}", plain_note))
    if m.acceptance_rate is not None:
        tiles.append(_tile(_number(m.acceptance_rate, 2), "acceptance rate α", EXPLAIN["alpha"]))
    tiles.append(_tile(_number(m.mean_accepted_length, 2), "tokens per step τ", EXPLAIN["tau"]))
    rows = [
        _row("new tokens", str(m.new_tokens), "" if finished else "(so far)"),
        _row("target forwards (steps)", str(m.target_forwards)),
        _row("drafted / accepted", f"{m.drafted} / {m.accepted}"),
        _row(f"{method} tokens/s", _number(m.tokens_per_second, 1), f"{m.wall_seconds:.2f} s"),
        _row("draft / verify time", f"{m.draft_seconds * 1e3:.0f} ms / {m.verify_seconds * 1e3:.0f} ms"),
        _row("draft cost ratio c", _number(m.cost_ratio), EXPLAIN["c"]),
    ]
    if plain is not None:
        rows.append(_row("plain tokens/s", _number(plain.tokens_per_second, 1), f"{plain.wall_seconds:.2f} s"))
    if sampling and plain is not None:
        rows.append(_row("same as plain?", "not expected",
                         "sampling: the output has the target's distribution, not the same text"))
    elif identical is True and bit_for_bit:
        rows.append(_row("same as plain?", "yes, bit for bit", EXACT_NOTE))
    elif identical is True:
        rows.append(_row("same as plain?", "yes, token for token"))
    elif identical is False and difference is not None:
        rows.append(_row("same as plain?", f"no: first difference at output token {difference.index}",
                         difference_note(difference)))
    if idle_seconds > 0.01:
        rows.append(_row("waits excluded", f"{idle_seconds:.2f} s", idle_why or "time between a run's own steps is "
                         "not counted"))
    theory_html = ""
    if theory is not None:
        gamma = f"γ = {theory.gamma:g}" if theory.gamma_fixed else f"mean γ = {theory.gamma:.2f}"
        measured = "–" if theory.measured_speedup is None else f"{theory.measured_speedup:.2f}×"
        measured += " (noisy)" if noise and theory.measured_speedup is not None else ""
        theory_html = (
            f'<div class="sv-theory-head">Theory (Leviathan et al. 2023) from the measured α = {theory.alpha:.3f}, '
            f'c = {theory.cost_ratio:.3f}, {escape_text(gamma)}</div>'
            + _row("expected τ  (1 - α^(γ+1)) / (1 - α)", f"{theory.expected_tokens_per_step:.2f}",
                   f"measured {theory.measured_tokens_per_step:.2f}")
            + _row("expected speedup  τ / (γc + 1)", f"{theory.expected_speedup:.2f}×",
                   f"measured {measured}; best γ for this α and c: {theory.best_gamma}"))
    return (f'<div class="sv-summary"><div class="sv-tiles">{"".join(tiles)}</div>'
            f'<div class="sv-rows">{"".join(rows)}{theory_html}</div></div>')
