"""The Learn tab in a real browser (as tests/test_ui_browser.py: Debian's chromium through Playwright, the app
served by tests/ui_server.py): a lesson runs, its chart or lanes have data and its sentence quotes the measured
figure; Stop stops one; "Open in the Run tab" fills the Run tab in. One tab for the module, on the session's
server and browser (conftest.py)."""
import re

import pytest

from scripts.lesson_screenshots import open_tab  # a lesson's sub-tab may sit in the row's overflow menu
from specviz.lessons.catalogue import SETTINGS
from ui_server import require_chromium


require_chromium()
pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def page(app_url, chromium):
    context = chromium.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.goto(app_url)
    tab.wait_for_selector("#sv-run", timeout=60_000)
    tab.get_by_role("tab", name="Learn").click()
    yield tab
    context.close()


# how long a lesson may run before its wait gives up: a wait, not a speed check (a lesson shares the cores with the
# other workers and may take minutes on a loaded machine); pytest.ini's per-test limit still stops a hung one
LESSON_WAIT = 600_000


def run_lesson(page, key, subtab, timeout=LESSON_WAIT):
    open_tab(page, subtab)
    page.click(f"#sv-learn-{key}")
    page.wait_for_selector(f"#sv-learn-{key}-status .sv-ok", timeout=timeout)


def test_the_mechanic_lays_each_forward_out_as_a_lane(page):
    run_lesson(page, "mechanic", "1 · Mechanic")
    lanes = page.locator("#sv-learn-mechanic-view .sv-lesson-steps .sv-step")
    assert lanes.count() >= 2
    assert lanes.first.evaluate("el => getComputedStyle(el).display") == "flex"
    sentence = page.inner_text("#sv-learn-mechanic-sentence")
    forwards, per = re.search(r"(\d+) forwards of the target wrote \d+ tokens: ([\d.]+) tokens per forward",
                              sentence).groups()
    assert int(forwards) == lanes.count() and float(per) >= 1.0


def test_the_verify_cost_chart_has_data_and_its_sentence_the_ratio(page):
    run_lesson(page, "cost", "3 · Cost of K")
    page.wait_for_selector("#sv-learn-cost-plot .js-plotly-plot .scatterlayer .trace", timeout=30_000)
    assert re.search(r"[\d.]+× the time of one", page.inner_text("#sv-learn-cost-sentence"))


def test_the_exactness_lesson_draws_three_histograms_and_quotes_its_p_values(page):
    open_tab(page, "2 · Same output")
    fields = page.get_by_label("seeds per histogram (more: more power, longer)")
    fields.first.fill("30")
    fields.first.press("Tab")
    # the slider's number box and its range both say 30 before Run is pressed: the value reached the app
    page.wait_for_function("""() => [...document.querySelectorAll('#sv-learn-exact-runs input')]
                                     .every(input => input.value === '30')""", timeout=10_000)
    run_lesson(page, "exact", "2 · Same output")
    assert "identical" in page.inner_text("#sv-learn-exact-greedy")
    assert page.locator("#sv-learn-exact-plot .js-plotly-plot .bars .point").count() >= 3
    assert "30 seeds each" in page.inner_text("#sv-learn-exact-plot")  # the slider reached the lesson
    sentence = page.inner_text("#sv-learn-exact-sentence")
    assert re.search(r"two-sample p = [\d.e-]+ against plain decoding", sentence)
    assert "The wrong verifier: p = " in sentence


def test_the_acceptance_and_drafter_lessons_fill_their_tables(page):
    run_lesson(page, "acceptance", "4 · Acceptance")
    assert re.search(r"gave [\d.]+× \(", page.inner_text("#sv-learn-acceptance-sentence"))
    page.wait_for_selector("#sv-learn-acceptance-plot .js-plotly-plot .scatterlayer .trace", timeout=30_000)
    run_lesson(page, "drafters", "6 · Drafters")
    assert re.search(r"Most tokens per forward: \S+ \(τ [\d.]+\)", page.inner_text("#sv-learn-drafters-sentence"))


def test_the_batch_lesson_plots_speedup_against_batch_size_with_a_draft_model(page):
    open_tab(page, "5 · Batch size")
    page.click("#sv-learn-batch-method input")
    page.get_by_role("option", name="draft", exact=True).click()
    for field, value in (("#sv-learn-batch-sizes textarea, #sv-learn-batch-sizes input", "1,2"),
                         ("#sv-learn-batch-tokens input", "8")):
        page.locator(field).first.fill(value)
        page.locator(field).first.press("Tab")
    page.click("#sv-learn-batch")
    # done: a clean verdict, or on a busy machine (this browser shares the server's cores) the verdict with the
    # lesson's own note that the figure is noisy (a speedup above tau); the plausibility tests pin that note
    page.wait_for_selector("#sv-learn-batch-status .sv-ok, #sv-learn-batch-status .sv-warn:has-text('noisy')",
                           timeout=LESSON_WAIT)
    # the status names the method that ran: the dropdown's draft (the distilled drafter), not its default
    assert re.search(r"^draft: [\d.]+x plain at batch 1", page.inner_text("#sv-learn-batch-status").strip())
    assert page.locator("#sv-learn-batch-plot .js-plotly-plot .scatterlayer .trace").count() >= 4


def test_stop_ends_a_lesson(page):
    open_tab(page, "2 · Same output")
    page.click("#sv-learn-exact")
    page.wait_for_selector("#sv-learn-exact-greedy:has-text('Greedy')", timeout=60_000)
    page.click("#sv-learn-exact-stop")
    page.wait_for_selector("#sv-learn-exact-status .sv-warn", timeout=30_000)
    assert "Stopped" in page.inner_text("#sv-learn-exact-status")


def test_open_in_the_run_tab_fills_it_in(page):
    open_tab(page, "1 · Mechanic")
    page.click("#sv-learn-mechanic-link")
    prompt = page.locator("#sv-prompt textarea")
    prompt.wait_for(state="visible", timeout=10_000)
    page.wait_for_function("p => document.querySelector('#sv-prompt textarea').value === p",
                           arg=SETTINGS["mechanic"]["prompt"], timeout=10_000)
    assert page.get_by_role("tab", name="Run", exact=True).get_attribute("aria-selected") == "true"
    assert page.get_by_role("tab", name="Learn").get_attribute("aria-selected") == "false"
    page.get_by_role("tab", name="Learn").click()  # back, for any later test


def test_a_saved_run_is_drawn_and_says_where_it_was_measured(page, tmp_path):
    from specviz import lessons
    from specviz.lessons.catalogue import LESSONS as CATALOGUE
    from specviz.lessons.saved import save_lesson

    points = [lessons.CostPoint("positions", k, ms, 128) for k, ms in [(1, 17.8), (4, 20.1), (8, 21.0)]]
    record = lessons.VerifyCost("cuda (default, bfloat16)", points, 270_000_000, 3350.0, "spec sheet")
    path = save_lesson(tmp_path, CATALOGUE[2], record, {"device": "NVIDIA H100 80GB HBM3",
                                                        "date": "2026-11-27 22:00 UTC", "commit": "abc1234"})
    (tmp_path / "broken.json").write_text("{not json")
    page.get_by_text("Open a saved run (measured elsewhere").click()
    page.locator("#sv-learn-saved input[type=file]").set_input_files([str(path), str(tmp_path / "broken.json")])
    page.wait_for_selector("#sv-learn-saved-status .sv-saved", timeout=30_000)
    summary = page.inner_text("#sv-learn-saved-status")
    assert "broken.json is not JSON" in summary  # the bad file is named; the good one still drawn
    label = "measured on NVIDIA H100 80GB HBM3, 2026-11-27 22:00 UTC, commit abc1234"
    open_tab(page, "3 · Cost of K")
    assert label in page.inner_text("#sv-learn-cost-status") and "not measured here" in page.inner_text(
        "#sv-learn-cost-status"
    )
    page.wait_for_selector("#sv-learn-cost-plot .js-plotly-plot .scatterlayer .trace", timeout=30_000)
    assert "1.18× the time of one" in page.inner_text("#sv-learn-cost-sentence")  # 21.0 / 17.8: the file's figure


POISON = ('eagle ![t](http://poison.invalid/x.png) [link](http://poison.invalid/l) <b>bold</b> '
          '<img src="http://poison.invalid/y.png">')


def test_every_string_of_a_saved_file_is_shown_as_text(page, tmp_path, default_target):
    """A saved run whose strings carry Markdown images and links and HTML tags (its method, prompt, prompt kind
    and where it was measured): each is shown as the characters it is; nothing is fetched, linked or bolded."""
    import json

    from specviz import lessons
    from specviz.lessons.catalogue import LESSONS as CATALOGUE
    from specviz.lessons.drafters import DrafterCost
    from specviz.lessons.saved import save_lesson
    from specviz.lessons.speedup import AcceptanceRow

    where = {"device": POISON, "date": "2026-11-27 22:00 UTC", "commit": "abc1234"}
    mechanic = save_lesson(tmp_path, CATALOGUE[0], lessons.finish(lessons.mechanic(
        default_target, "Count: one two three", "ngram", max_new_tokens=8)), where)
    data = json.loads(mechanic.read_text())
    data["record"]["method"], data["record"]["prompt"] = POISON, POISON  # edited as an attacker would
    mechanic.write_text(json.dumps(data))
    acceptance = save_lesson(tmp_path, CATALOGUE[3], [AcceptanceRow(POISON, POISON, 4, 0.6, 2.1, 0.1, 1.3, 1.5, 32)],
                             where)
    drafters = save_lesson(tmp_path, CATALOGUE[5], [DrafterCost(POISON, 1000, 4000, 10 ** 8, 4 * 10 ** 8, 0.5, 2.0)],
                           where)
    fetched = []
    page.on("request", lambda request: fetched.append(request.url) if "poison.invalid" in request.url else None)
    page.get_by_text("Open a saved run (measured elsewhere").click()
    page.locator("#sv-learn-saved input[type=file]").set_input_files([str(mechanic), str(acceptance), str(drafters)])
    page.wait_for_function("() => document.querySelector('#sv-learn-saved-status').innerText.includes('What each')",
                           timeout=30_000)
    shown = [page.inner_text("#sv-learn-saved-status")]
    for subtab, key in (("1 · Mechanic", "mechanic"), ("4 · Acceptance", "acceptance"),
                        ("6 · Drafters", "drafters")):
        open_tab(page, subtab)
        page.wait_for_function(
            f"() => document.querySelector('#sv-learn-{key}-status').innerText.includes('Saved run')", timeout=30_000
        )
        shown.append(page.inner_text(f"#sv-learn-{key}-status"))
        shown.append(page.locator(".tabitem:visible").last.inner_text())
    page.wait_for_selector("#sv-learn-acceptance-plot .js-plotly-plot", timeout=30_000, state="attached")
    page.wait_for_timeout(500)  # anything an image or a link would fetch has been asked for by now
    assert fetched == []
    markup = page.evaluate("""() => [
        ...[...document.querySelectorAll('img')].filter(e => (e.src || '').includes('poison.invalid')),
        ...[...document.querySelectorAll('a')].filter(e => (e.getAttribute('href') || e.getAttribute('xlink:href')
                                                              || '').includes('poison.invalid')),
        ...[...document.querySelectorAll('b, strong')].filter(e => e.textContent === 'bold'),
        ...[...document.querySelectorAll('tspan')].filter(e => e.textContent === 'bold'
                                                              && getComputedStyle(e).fontWeight === '700'),
    ].map(e => e.outerHTML)""")
    assert markup == []
    text = "\n".join(shown)
    assert "<b>bold</b>" in text and '<img src="http://poison.invalid/y.png">' in text  # shown as the characters
    assert "![t](http://poison.invalid/x.png)" in text
    # control: the same string rendered as the page renders Markdown would have been an image and a link
    import markdown_it

    rendered = markdown_it.MarkdownIt().render(POISON)
    assert '<img src="http://poison.invalid/x.png"' in rendered and '<a href="http://poison.invalid/l"' in rendered
