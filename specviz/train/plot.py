"""The loss curve as a PNG, drawn with Pillow (present wherever gradio or matplotlib is), so that training
needs no plotting library of its own."""
from __future__ import annotations

from pathlib import Path

WIDTH, HEIGHT, MARGIN = 800, 480, 60


def _scale(values: list[float], low: float, high: float, start: float, end: float) -> list[float]:
    span = (high - low) or 1.0
    return [start + (v - low) / span * (end - start) for v in values]


def save_loss_curve(history: list[dict], evals: list[dict], path: Path, title: str) -> Path:
    """Training loss per logged step (left axis) and the held-out tokens-per-step estimate (right axis)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    left, right, top, bottom = MARGIN, WIDTH - MARGIN, MARGIN // 2 + 10, HEIGHT - MARGIN
    draw.rectangle([left, top, right, bottom], outline="black")
    draw.text((left, 8), title, fill="black")
    steps = [h["step"] for h in history] or [0]
    losses = [h["loss"] for h in history] or [0.0]
    last_step = max(steps + [e["step"] for e in evals] + [1])
    xs = _scale(steps, 0, last_step, left, right)
    low, high = min(losses), max(losses)
    ys = _scale(losses, low, high, bottom, top)
    if len(xs) > 1:
        draw.line(list(zip(xs, ys)), fill="#004488", width=2)
    draw.text((left - 55, top), f"{high:.3g}", fill="#004488")
    draw.text((left - 55, bottom - 12), f"{low:.3g}", fill="#004488")
    draw.text((left, bottom + 8), "0", fill="black")
    draw.text((right - 40, bottom + 8), f"step {last_step}", fill="black")
    draw.text((left + 10, bottom + 25), "training loss (blue)", fill="#004488")
    taus = [e["expected_tau"] for e in evals]
    if taus:
        t_low, t_high = min(taus + [1.0]), max(taus) + 0.1
        points = list(zip(_scale([e["step"] for e in evals], 0, last_step, left, right),
                          _scale(taus, t_low, t_high, bottom, top)))
        for x, y in points:
            draw.ellipse([x - 4, y - 4, x + 4, y + 4], outline="#BB5566", width=2)
        if len(points) > 1:
            draw.line(points, fill="#BB5566", width=1)
        draw.text((right + 5, top), f"{t_high:.2f}", fill="#BB5566")
        draw.text((right + 5, bottom - 12), f"{t_low:.2f}", fill="#BB5566")
        draw.text((left + 200, bottom + 25), "held-out expected tokens per step (red circles)", fill="#BB5566")
    path = Path(path)
    image.save(path)
    return path
