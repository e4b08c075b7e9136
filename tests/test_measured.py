"""The Spec-Bench figures the Compare tab shows: they are the bench reports' own, pooled as the bench pools them."""
import copy
import gzip
import json
from pathlib import Path


from specviz.measure.measured import MEASURED, load_measured, measured_run
from specviz.ui.view import MEASURED_HEADERS, measured_table

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "measured_drafters.py"


def runs_listed():
    namespace = {"__file__": str(SCRIPT), "__name__": "listed"}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), namespace)
    return namespace["RUNS"]


def reports(files):
    def text(path):  # large reports are kept gzipped
        return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()

    return [json.loads(text(ROOT / f)) for f in files]


def test_the_shipped_figures_are_the_reports_pooled():
    shipped = load_measured()
    listed = runs_listed()
    assert [run["label"] for run in shipped] == [label for label, _, _ in listed]
    for run, (label, doc, files) in zip(shipped, listed):
        assert (ROOT / doc).is_file()
        assert run == json.loads(json.dumps(measured_run(label, doc, reports(files))))


def test_a_changed_report_changes_the_figures():
    """The control: the comparison above sees a change in one prompt's time."""
    label, doc, files = runs_listed()[0]
    original = reports(files)
    changed = copy.deepcopy(original)
    row = next(r for r in changed[0]["results"] if r["method"] == "ngram:4")
    row["wall_seconds"] *= 2
    before = {m["method"]: m for m in measured_run(label, doc, original)["methods"]}
    after = {m["method"]: m for m in measured_run(label, doc, changed)["methods"]}
    assert after["ngram:4"]["speedup"] < before["ngram:4"]["speedup"]
    assert after["plain"] == before["plain"]


def test_every_drafter_of_the_default_target_is_in_every_run():
    for run in load_measured():
        kinds = {m["method"].split(":")[0] for m in run["methods"]}
        assert {"plain", "draft", "ngram", "retrieval", "eagle", "medusa"} <= kinds, run["label"]


def test_the_table_says_plain_drafts_nothing_and_gives_c_for_a_drafter():
    run = load_measured()[0]
    table = {row[0]: dict(zip(MEASURED_HEADERS, row)) for row in measured_table(run)}
    assert table["plain"]["α"] == "–" and table["plain"]["c"] == "–" and table["plain"]["speedup"] == "1.00×"
    draft = table["draft:4"]
    assert 0 < float(draft["c"]) < 1 and 0 < float(draft["α"]) < 1 and float(draft["τ"]) > 1


def test_no_file_means_no_runs(tmp_path):
    assert load_measured(tmp_path / "missing.json") == []
    assert MEASURED.is_file()  # the app ships it
