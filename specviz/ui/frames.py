"""Keeping an idle page from drawing 60 frames a second.

Gradio 6.31's status tracker counts its elapsed time in a requestAnimationFrame loop that stops only when its
status leaves "pending". The page's loading tracker is removed while still pending, so its loop runs for as
long as the page is open: chromium then produces a frame 60 times a second, idle or not, and on the 2-core
machine that work is taken from the engine. The script below, first in the page's <head>, hands the tracker's
timer callbacks (recognised by their source text) to a one-second timeout instead: the orphan loop drops to
one callback a second, and a visible tracker's timer still counts, in whole seconds. Gradio's own `head=`
cannot do this: its frontend adds that head only after its modules have taken their reference to
requestAnimationFrame. With another gradio version the pattern may simply not match, which changes nothing;
tests/test_ui_browser.py counts the idle page's frames so that such a change is noticed.
"""
from __future__ import annotations

SLOW_TIMER_MS = 1000
MARK = "sv-frames"
SCRIPT = f"""<script id="{MARK}">
(() => {{
  const raf = window.requestAnimationFrame.bind(window);
  window.requestAnimationFrame = function (callback) {{
    const source = String(callback);
    if (source.includes("performance.now()-") && source.includes("/1e3")) {{
      // negative: no rAF id, so a cancelAnimationFrame of it cancels nothing else (the tracker never cancels)
      return -setTimeout(() => raf(callback), {SLOW_TIMER_MS});
    }}
    return raf(callback);
  }};
}})();
</script>"""


class EarlyScript:
    """ASGI middleware: puts SCRIPT right after <head> in every HTML page the app serves, where it runs before
    any of gradio's module scripts."""

    def __init__(self, app, script: str = SCRIPT):
        self.app = app
        self.script = script.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        start: dict | None = None
        chunks: list[bytes] = []

        async def capture(message):
            nonlocal start
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers", [])).get(b"content-type", b"")
                if content_type.startswith(b"text/html"):
                    start = message
                    return
            elif message["type"] == "http.response.body" and start is not None:
                chunks.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                body = b"".join(chunks).replace(b"<head>", b"<head>" + self.script, 1)
                headers = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await self.app(scope, receive, capture)
