"""The Learn tab's screenshots, one a lesson, taken from a live app on this machine, and how long each lesson
took in the browser (from pressing Run lesson to its sentence); or, with --saved, drawn from lessons measured
elsewhere (`python -m specviz learn all --out DIR` on a GPU machine with no browser).

    python -m scripts.lesson_screenshots [--out assets/screenshots] [--only mechanic,exact,...: the lessons' keys]
        [--timings results/DIR/lessons.json] [--saved DIR [--suffix -h100]]

Each lesson runs with its defaults on the offline default model; its panel is saved as learn-KEY.png. The app is
served in this process on a free loopback port; the browser is Debian's chromium through Playwright (setup.sh
--dev installs both). Figures in the pictures are this machine's, measured live; with --saved, the saved files'
(DIR/lesson-N-KEY.json, opened through the tab's "Open a saved run"), each panel labelled with where they were
measured, and saved as learn-KEY{suffix}.png.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from scripts.screenshots import chosen, served_app
from specviz.lessons.catalogue import LESSONS
from specviz.ui.learn import tab_title

ROOT = Path(__file__).resolve().parents[1]

LESSON_KEYS = tuple(lesson.key for lesson in LESSONS)  # every lesson the tab has, in its order


def open_tab(page, title: str) -> None:
    """Select a lesson's sub-tab; one that does not fit the row is in the row's overflow menu (gradio's "...")."""
    tab = page.get_by_role("tab", name=title)
    if tab.count() and tab.first.is_visible():
        tab.first.click()
        return
    menu = page.locator(".overflow-menu", has=page.locator(".overflow-dropdown button", has_text=title))
    menu.locator("button").first.click()
    menu.locator(".overflow-dropdown button", has_text=title).click()


def run_lesson(page, key: str, title: str) -> float:
    """Open the lesson's sub-tab, press Run lesson, wait for its result: seconds it took."""
    open_tab(page, title)
    started = time.monotonic()
    page.click(f"#sv-learn-{key}")
    page.wait_for_selector(f"#sv-learn-{key}-status .sv-ok", timeout=600_000)
    seconds = time.monotonic() - started
    page.wait_for_timeout(800)  # the charts' transitions
    return seconds


def open_saved(page, paths: list[Path]) -> None:
    """Open the saved lessons through the tab's file input; stop on any the tab could not read."""
    page.get_by_text("Open a saved run (measured elsewhere").click()
    page.locator("#sv-learn-saved input[type=file]").set_input_files([str(p) for p in paths])
    page.wait_for_selector("#sv-learn-saved-status .sv-saved", timeout=120_000)
    errors = page.locator("#sv-learn-saved-status .sv-error")
    if errors.count():
        raise SystemExit("the tab could not read: " + "; ".join(errors.all_inner_texts()))


def show_saved(page, key: str, title: str) -> None:
    open_tab(page, title)
    status = "#sv-learn-batch-status" if key == "batch" else f"#sv-learn-{key}-status"
    page.wait_for_selector(f"{status} .sv-saved", timeout=30_000)
    page.wait_for_timeout(1500)  # the charts draw when their tab shows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "assets" / "screenshots"))
    parser.add_argument("--only", default=None, help=f"some of {','.join(LESSON_KEYS)} (default: every lesson; with "
                        "--saved, every lesson saved in DIR)")
    parser.add_argument("--timings", default=None, help="write each lesson's seconds to this JSON file")
    parser.add_argument("--saved", default=None, metavar="DIR", help="draw the lessons saved in DIR by `specviz learn "
                        "--out` instead of running them here")
    parser.add_argument("--suffix", default="", help="appended to each file name (learn-KEY{suffix}.png)")
    args = parser.parse_args(argv)
    if args.only is None and args.saved:
        from specviz.lessons.saved import file_name

        args.only = ",".join(lesson.key for lesson in LESSONS if (Path(args.saved) / file_name(lesson)).is_file())
    keys = chosen(parser, args.only or ",".join(LESSON_KEYS), LESSON_KEYS, "lessons")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    titles = {lesson.key: tab_title(lesson) for lesson in LESSONS}  # as the tab bar names them
    files = {}
    if args.saved:
        from specviz.lessons.saved import file_name

        files = {lesson.key: Path(args.saved) / file_name(lesson) for lesson in LESSONS if lesson.key in keys}
        missing = [str(path) for path in files.values() if not path.is_file()]
        if missing:
            parser.error(f"no saved lesson at {', '.join(missing)} (write them with: python -m specviz learn all --out "
                         "DIR)")
    timings = {}
    with served_app() as (browser, url):
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.goto(url)
        page.wait_for_selector("#sv-run", timeout=120_000)
        page.get_by_role("tab", name="Learn").click()
        if files:
            open_saved(page, list(files.values()))
        for key in keys:
            if files:
                show_saved(page, key, titles[key])
            else:
                timings[key] = round(run_lesson(page, key, titles[key]), 1)
            page.mouse.move(0, 0)
            path = out / f"learn-{key}{args.suffix}.png"
            # the lesson's own panel: the innermost tab panel holding its Run button
            page.locator(f"[role=tabpanel]:has(#sv-learn-{key})").last.screenshot(path=str(path))
            print(f"{path}: " + (f"{timings[key]} s" if key in timings else f"from {files[key]}"), flush=True)
    if args.timings and timings:
        Path(args.timings).parent.mkdir(parents=True, exist_ok=True)
        Path(args.timings).write_text(json.dumps({"seconds": timings}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
