"""A first, small page: prompt in, tokens out, coloured by kind as the engine produces them."""
from __future__ import annotations

import html

import gradio as gr

from ..api import encode, make_proposer, warm_up
from ..engine import SpeculativeRun
from ..errors import SpecvizError
from ..models import load_model
from ..proposers import METHODS
from ..records import TokenKind
from ..settings import DecodeSettings

STYLE = {
    TokenKind.ACCEPTED: "color:#004488;text-decoration:underline solid",
    TokenKind.REJECTED: "color:#BB5566;text-decoration:line-through",
    TokenKind.RESAMPLED: "color:#9A6B00;font-weight:bold;text-decoration:underline wavy #9A6B00",
    TokenKind.BONUS: "color:#228833;text-decoration:underline double",
    TokenKind.TARGET: "",
}


def render_tokens(tokens) -> str:
    spans = (f'<span class="tok tok-{t.kind.value}" style="{STYLE[t.kind]}" title="{t.kind.value}, step {t.step}">'
             f"{html.escape(t.text)}</span>" for t in tokens)
    return f'<div style="white-space:pre-wrap;font-family:monospace">{"".join(spans)}</div>'


def run(prompt, method, gamma, max_new_tokens):
    try:
        settings = DecodeSettings(max_new_tokens=int(max_new_tokens), gamma=int(gamma)).validate()
        target = load_model("default")
        ids = encode(target, prompt)
        warm_up(target)
        speculative = SpeculativeRun(target, make_proposer(method, target), ids, settings, prompt_text=prompt)
        shown = []
        for step in speculative:
            shown.extend(step.tokens)
            yield render_tokens(shown), ""
        m = speculative.result.metrics
        yield render_tokens(shown), (f"{m.new_tokens} tokens, {m.tokens_per_second:.1f} tok/s, "
                                     f"tau={m.mean_accepted_length:.2f}")
    except SpecvizError as error:
        yield "", f"Error: {error}"


def build_demo() -> gr.Blocks:
    with gr.Blocks(title="specviz") as demo:
        gr.Markdown("# specviz: speculative decoding, step by step")
        prompt = gr.Textbox(label="Prompt", value="Write a Python function that reverses a string.")
        with gr.Row():
            method = gr.Dropdown([m for m in METHODS if m != "draft"], value="ngram", label="Method")
            gamma = gr.Slider(1, 16, value=4, step=1, label="gamma")
            max_new = gr.Slider(8, 512, value=128, step=8, label="max new tokens")
        button = gr.Button("Run", variant="primary")
        view = gr.HTML()
        summary = gr.Markdown()
        button.click(run, [prompt, method, gamma, max_new], [view, summary])
    return demo
