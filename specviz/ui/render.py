"""HTML for the app, built in Python from step records: pure functions, no gradio.

Every piece of prompt, model or token text goes through escape_text(): html.escape, and also `$`, braces and
backticks as character references, so that nothing the model writes can become markup or be evaluated by a
client-side template (gr.HTML templates are JavaScript template literals: docs/design.md, "Pitfalls")."""
from __future__ import annotations

import html

from ..records import RunMetrics, TokenKind, TokenRecord
from .view import FirstDifference, Theory

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
    """The hover text of one token: kind, step, p, q, min(1, p/q) and the draw u (plain text, escaped later).
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


def _shown_text(token: TokenRecord) -> str:
    if token.kind == TokenKind.REJECTED:  # not in the output: make a rejected newline visible, keep it inline
        return token.text.replace("\n", "⏎")
    return token.text


def token_spans(tokens: list[TokenRecord], current_step: int | None = None, sampling: bool = True) -> str:
    parts = []
    previous_step = None
    rejected_in_step = 0
    for token in tokens:
        classes = ["tok", f"tok-{token.kind.value}"]
        if token.step != previous_step:
            classes.append("sv-step-start")
            previous_step = token.step
            rejected_in_step = 0
        reached = token.kind != TokenKind.REJECTED or rejected_in_step == 0
        if token.kind == TokenKind.REJECTED:
            rejected_in_step += 1
        if current_step is not None and token.step == current_step:
            classes.append("sv-current")
        parts.append(f'<span class="{" ".join(classes)}" data-step="{token.step}" '
                     f'data-tip="{escape_text(token_tip(token, sampling, reached))}">{escape_text(_shown_text(token))}</span>')
    return "".join(parts)


def token_view_html(tokens: list[TokenRecord], prompt: str = "", header: str = "",
                    current_step: int | None = None, upto_step: int | None = None, sampling: bool = True) -> str:
    """The live token view: the prompt, then every shown token coloured by kind, with a hover tip.
    upto_step hides later steps (replay); current_step highlights one step."""
    if upto_step is not None:
        tokens = [t for t in tokens if t.step <= upto_step]
    head = f'<div class="sv-run-header">{escape_text(header)}</div>' if header else ""
    prompt_html = (f'<div class="sv-prompt"><span class="sv-label">Prompt</span>{escape_text(prompt)}</div>'
                   if prompt else "")
    body = token_spans(tokens, current_step, sampling) or '<span class="sv-muted">(no tokens yet)</span>'
    return f'<div class="sv-tokens">{head}{prompt_html}<div class="sv-output">{body}</div></div>'


def legend_html() -> str:
    items = "".join(
        f'<span class="sv-legend-item"><span class="tok tok-{kind.value}">{kind.value}</span>'
        f'<span class="sv-legend-help">{escape_text(KIND_HELP[kind])}</span></span>'
        for kind in SHOWN_KINDS
    )
    return f'<div class="sv-legend" aria-label="token kinds">{items}</div>'


def status_html(message: str, level: str = "info") -> str:
    """A one-line status box; level info, ok, warn or error (errors are announced to screen readers)."""
    role = ' role="alert"' if level == "error" else ""
    return f'<div class="sv-status sv-{level}"{role}>{escape_text(message)}</div>'


def _row(name: str, value: str, note: str = "") -> str:
    note_html = f'<span class="sv-muted"> {escape_text(note)}</span>' if note else ""
    return f"<tr><th>{escape_text(name)}</th><td>{escape_text(value)}{note_html}</td></tr>"


def summary_html(metrics: RunMetrics, method: str, plain: RunMetrics | None = None, speedup: float | None = None,
                 identical: bool | None = None, difference: FirstDifference | None = None,
                 sampling: bool = False, idle_seconds: float = 0.0, finished: bool = True,
                 theory: Theory | None = None) -> str:
    """The measured numbers of a run (speeds on engine time), the baseline and the theory beside them."""
    m = metrics
    rows = [
        _row("new tokens", str(m.new_tokens), "" if finished else "(so far)"),
        _row("target forwards (steps)", str(m.target_forwards)),
        _row("drafted / accepted", f"{m.drafted} / {m.accepted}"),
        _row("acceptance rate α", _number(m.acceptance_rate)),
        _row("tokens per step τ", _number(m.mean_accepted_length, 2)),
        _row(f"{method} tokens/s", _number(m.tokens_per_second, 1), f"{m.wall_seconds:.2f} s"),
        _row("draft / verify time", f"{m.draft_seconds * 1e3:.0f} ms / {m.verify_seconds * 1e3:.0f} ms"),
        _row("draft cost ratio c", _number(m.cost_ratio), "drafter time per token / target forward time"),
    ]
    if plain is not None:
        rows.append(_row("plain tokens/s", _number(plain.tokens_per_second, 1), f"{plain.wall_seconds:.2f} s"))
    if speedup is not None:
        rows.append(_row("speedup", f"{speedup:.2f}×", "plain time / speculative time, same prompt, same process"))
    if sampling and plain is not None:
        rows.append(_row("same as plain?", "not expected",
                         "sampling: the output has the target's distribution, not the same text"))
    elif identical is True:
        rows.append(_row("same as plain?", "yes, token for token"))
    elif identical is False and difference is not None:
        rows.append(_row("same as plain?", f"no: first difference at output token {difference.index}",
                         f"speculative {difference.speculative!r}, plain {difference.plain!r}"))
    if idle_seconds > 0.01:
        rows.append(_row("waits excluded", f"{idle_seconds:.2f} s", "pauses and other users' steps are not counted"))
    if theory is not None:
        gamma = f"γ = {theory.gamma:g}" if theory.gamma_fixed else f"mean γ = {theory.gamma:.2f}"
        rows.append(f'<tr class="sv-theory-head"><th colspan="2">Theory (Leviathan et al. 2023) from the measured '
                    f'α = {theory.alpha:.3f}, c = {theory.cost_ratio:.3f}, {escape_text(gamma)}</th></tr>')
        rows.append(_row("expected τ  (1 - α^(γ+1)) / (1 - α)", f"{theory.expected_tokens_per_step:.2f}",
                         f"measured {theory.measured_tokens_per_step:.2f}"))
        measured = "–" if theory.measured_speedup is None else f"{theory.measured_speedup:.2f}×"
        rows.append(_row("expected speedup  τ / (γc + 1)", f"{theory.expected_speedup:.2f}×",
                         f"measured {measured}; best γ for this α and c: {theory.best_gamma}"))
    return f'<table class="sv-summary">{"".join(rows)}</table>'
