"""The Run tab's screenshots in README.md and docs/app.md, taken again from a live app: the default example
prompt run once per screen, then the screen saved as a PNG.

    python -m scripts.screenshots [--out assets/screenshots] [--only light,dark,projector,phone,phone-charts]

- light.png: 1400x1000, the light theme, the drafts reading mode;
- dark.png: 1400x1000, the dark theme, the steps reading mode (one lane per step);
- projector.png: 1280x720, the answer reading mode in presentation mode (large type, thick marks);
- phone.png: 400x860, the answer reading mode, scrolled to the step line and the tokens;
- phone-charts.png: 400x1080, scrolled to the Steps chart (its panels one under another on a phone).

The app is served in this process on a free loopback port, with the offline default model; the browser is
Debian's chromium through Playwright (setup.sh --dev installs both). Timings in the summary card are this
machine's, measured live, so they differ from one run to the next.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
SCREENS = {  # name: (viewport, theme query, reading mode, presentation mode)
    "light": ((1400, 1000), "", "drafts", False),
    "dark": ((1400, 1000), "?__theme=dark", "steps", False),
    "projector": ((1280, 720), "", "answer", True),
    "phone": ((400, 860), "", "answer", False),
    "phone-charts": ((400, 1080), "", "answer", False),
}
SCROLL_TO = {"phone": "#sv-mode", "phone-charts": "#sv-step-plot"}  # the others: the top of the page


def take(browser, url: str, name: str, out: Path) -> Path:
    """One screen: the default example run to its end, the reading mode set, the charts drawn, saved."""
    (width, height), query, mode, present = SCREENS[name]
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(url + query)
    page.wait_for_selector("#sv-run", timeout=120_000)
    page.click("#sv-run")
    page.wait_for_selector("#sv-status .sv-ok", timeout=300_000)
    page.wait_for_selector("#sv-race-plot .js-plotly-plot .main-svg", timeout=60_000)
    page.locator("#sv-mode").get_by_text(mode, exact=True).click()
    page.wait_for_function(f"document.body.dataset.svMode === '{mode}'")
    if present:
        page.get_by_text("Settings: models").click()
        page.locator("#sv-present input").check()
        page.wait_for_function("document.body.classList.contains('sv-present')")
        page.get_by_text("Settings: models").click()
    page.mouse.move(0, 0)  # no tip or hover state in the picture
    if name in SCROLL_TO:
        page.evaluate(f"document.querySelector('{SCROLL_TO[name]}').scrollIntoView({{block: 'start'}})")
    else:
        page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)  # the charts' and the radio's transitions
    path = out / f"{name}.png"
    page.screenshot(path=str(path))
    context.close()
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "assets" / "screenshots"))
    parser.add_argument("--only", default=",".join(SCREENS), help=f"some of {','.join(SCREENS)}")
    args = parser.parse_args(argv)
    names = chosen(parser, args.only, SCREENS, "screens")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    with served_app() as (browser, url):
        for name in names:
            print(take(browser, url, name, out), flush=True)
    return 0


def chosen(parser, only: str, known, what: str) -> list[str]:
    """The comma-separated names of --only, each one of `known` (else the parser's error)."""
    names = [name for name in only.split(",") if name]
    unknown = set(names) - set(known)
    if unknown:
        parser.error(f"unknown {what}: {', '.join(sorted(unknown))}")
    return names


@contextmanager
def served_app():
    """The app served in this process on a free loopback port, and Debian's chromium: (browser, url)."""
    from playwright.sync_api import sync_playwright

    from specviz.ui.app import build_demo, launch

    demo = build_demo()
    _, url, _ = launch(demo, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser, url.rstrip("/")
            browser.close()
    finally:
        demo.close()


if __name__ == "__main__":
    sys.exit(main())
