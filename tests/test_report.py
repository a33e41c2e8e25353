"""algosel.study.report: the HTML report and its figures, built from the committed slice (CPU)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SLICE

from algosel.candidates import DEFAULT_ID
from algosel.cli.study import add_report_parser
from algosel.learn.artifact import SelectorError
from algosel.learn.evaluate import SELECTORS, is_test_shape
from algosel.problem import ConvProblem
from algosel.records import RecordsError, load_records
from algosel.records.analysis import comparison_table
from algosel.study.report import build_report
from algosel.study.report_data import (
    DEFAULT_WORST,
    KNOWN_SELECTORS,
    LABELS,
    ReportError,
    compare,
    cudnn_version,
    worst_cases,
)


class _Page(HTMLParser):
    """The <img> sources, the text and the tables' cell texts of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.text: list[str] = []
        self.cells: list[str] = []
        self._in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        self._in_cell = tag in ("td", "th") or self._in_cell

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._in_cell = False

    def handle_data(self, data):
        self.text.append(data)
        if self._in_cell and data.strip():
            self.cells.append(data.strip())


def _parse(index: Path) -> _Page:
    page = _Page()
    page.feed(index.read_text(encoding="utf-8"))
    return page


@pytest.fixture(scope="module")
def model_dir(slice_model) -> Path:
    return slice_model[0]


@pytest.fixture(scope="module")
def with_model(model_dir, tmp_path_factory) -> Path:
    return build_report(SLICE, model_dir, tmp_path_factory.mktemp("report") / "out", worst=3)


@pytest.fixture(scope="module")
def without_model(tmp_path_factory) -> Path:
    return build_report(SLICE, None, tmp_path_factory.mktemp("report-records"), worst=4)


@pytest.fixture(scope="module")
def comparison(model_dir):
    return compare(SLICE, model_dir)


def test_selector_names_agree_with_evaluate() -> None:
    assert KNOWN_SELECTORS == SELECTORS
    assert set(LABELS) == set(SELECTORS)


@pytest.mark.parametrize("index_fixture", ["with_model", "without_model"])
def test_every_image_exists_and_loads(index_fixture, request) -> None:
    import matplotlib.image

    index = request.getfixturevalue(index_fixture)
    assert index.name == "index.html" and index.is_file()
    page = _parse(index)
    assert len(page.images) >= 2  # the CDF and at least one network figure
    for src in page.images:
        assert not Path(src).is_absolute() and "/" not in src, src  # next to index.html, relative
        pixels = matplotlib.image.imread(index.parent / src)
        height, width = pixels.shape[:2]
        assert height >= 300 and width >= 500, (src, pixels.shape)
        assert float(np.std(pixels[..., :3])) > 0.05, f"{src} is blank"


def test_report_with_model_compares_on_held_out_problems(with_model, comparison) -> None:
    page = _parse(with_model)
    text = " ".join(page.text)
    for sel in ("model", "heuristic_a", "heuristic_b", "pytorch_default"):
        assert LABELS[sel] in page.cells, sel
    assert "same" in text and "held-out problems" in text
    table = comparison.table
    assert comparison.held_out and comparison.selectors == ["model", "heuristic_a", "heuristic_b", "pytorch_default"]
    shapes = [ConvProblem.from_key(k).shape_key for k in table.index]
    assert is_test_shape(shapes).all()
    frame, _ = load_records(SLICE)
    all_shapes = {ConvProblem.from_key(k).shape_key for k in frame["problem_key"].unique()}
    assert len(set(shapes)) == int(is_test_shape(sorted(all_shapes)).sum())
    assert f"{len(table):,} held-out problems" in text


def test_header_names_the_inputs_and_the_environment(with_model, model_dir) -> None:
    text = " ".join(_parse(with_model).text)
    _, envs = load_records(SLICE)
    assert str(SLICE) in text and str(model_dir) in text
    for env in envs.values():
        assert env["gpu_name"] in text and f"cuDNN {cudnn_version(env['cudnn'])}" in text


def test_summary_tables_hold_the_comparison(with_model, comparison) -> None:
    cells = _parse(with_model).cells
    comp = comparison_table(comparison.table, comparison.selectors)
    assert set(comp["value"]) >= {"all", "fwd", "bwd_data", "bwd_filter", "float16", "float32"}
    for row in comp.to_dict("records"):
        assert f"{row['geomean']:.3f}" in cells and f"{100 * row['within_5pct']:.1f}%" in cells
    for value in ("fwd", "bwd_data", "bwd_filter", "float16", "float32"):
        assert value in cells


def test_worst_cases_name_the_chosen_and_best_candidates(comparison) -> None:
    frame, _ = load_records(SLICE)
    times = frame.set_index(["problem_key", "candidate_id"])["time_ms_median"]
    for sel in comparison.selectors:
        cases = worst_cases(comparison.table, sel, 5)
        assert len(cases) == 5
        assert cases["ratio"].is_monotonic_decreasing
        ratios = comparison.table[sel] / comparison.table["best"]
        assert cases["ratio"].iloc[0] == ratios.max()
        for key, row in cases.iterrows():
            # The named candidates are the ones whose recorded times give the ratio.
            assert times[(key, row["chosen_candidate"])] == row["chosen_time_ms"]
            assert times[(key, row["best_candidate"])] == row["best_time_ms"]
            assert row["ratio"] == pytest.approx(row["chosen_time_ms"] / row["best_time_ms"])
            assert (sel != "pytorch_default") or row["chosen_candidate"] == DEFAULT_ID


def test_worst_cases_are_in_the_page(with_model, comparison) -> None:
    cells = _parse(with_model).cells
    for sel in comparison.selectors:
        for key, row in worst_cases(comparison.table, sel, 3).iterrows():
            assert key in cells and row["chosen_candidate"] in cells


def test_network_totals(comparison) -> None:
    whole, held = comparison.whole_networks, comparison.held_out_networks
    frame, _ = load_records(SLICE)
    in_records = {s.removeprefix("suite:") for s in frame["source"].unique() if s.startswith("suite:")}
    assert set(whole["network"]) == in_records
    assert "model_ms" not in whole  # the model's total over training shapes would be in-sample
    assert held is not None and "model_ms" in held and (held["calls"] > 0).all()
    for totals, selectors in ((whole, ["heuristic_a", "heuristic_b", "pytorch_default"]), (held, SELECTORS[:4])):
        for sel in selectors:
            assert (totals[f"{sel}_vs_best"] >= 1 - 1e-12).all(), sel
    merged = held.merge(whole, on=["network", "size", "dtype"], suffixes=("_held", "_whole"))
    assert len(merged) == len(held)
    assert (merged["calls_held"] <= merged["calls_whole"]).all()


def test_records_other_than_the_models_are_flagged(comparison) -> None:
    assert comparison.notes == []  # the slice model was trained on these very records
    # trained on the full records, of which the slice is a part
    shipped = REPO / "models" / "joint-h100-h200-cudnn91900"
    notes = compare(SLICE, shipped, selectors=["model", "heuristic_a"]).notes
    assert any("differ from the model's training records" in n for n in notes)


def test_report_without_model_uses_every_problem(without_model) -> None:
    page = _parse(without_model)
    text = " ".join(page.text)
    frame, _ = load_records(SLICE)
    assert LABELS["model"] not in page.cells
    for sel in ("heuristic_a", "heuristic_b", "pytorch_default"):
        assert LABELS[sel] in page.cells
    assert f"every one of the {frame['problem_key'].nunique():,} problems" in text
    assert all("held_out" not in src for src in page.images)


def test_chosen_selectors_only(model_dir, tmp_path) -> None:
    index = build_report(SLICE, model_dir, tmp_path, selectors=["model", "gemm_else_a"], worst=1)
    cells = _parse(index).cells
    assert LABELS["gemm_else_a"] in cells and LABELS["model"] in cells
    assert LABELS["heuristic_b"] not in cells


@pytest.mark.parametrize(
    ("selectors", "match"),
    [
        (["heuristic_a", "heuristic_c"], "unknown selector 'heuristic_c'"),
        ("cudnn", "unknown selector 'cudnn'"),
        (["model"], "selector 'model' needs a model directory"),
        ([], "no selector to compare"),
    ],
)
def test_bad_selectors_are_refused_before_loading(selectors, match, tmp_path) -> None:
    # A data directory that does not exist: the selector check must come first and name the bad value.
    with pytest.raises(ReportError, match=match):
        build_report(tmp_path / "no-such-data", None, tmp_path / "out", selectors=selectors)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("worst", [0, -3, 2.5, True])
def test_bad_worst_is_refused(worst, tmp_path) -> None:
    with pytest.raises(ReportError, match=f"worst must be a positive integer, got {worst!r}"):
        build_report(SLICE, None, tmp_path, worst=worst)


def test_missing_data_dir(tmp_path) -> None:
    missing = tmp_path / "no-such-data"
    with pytest.raises(RecordsError, match=str(missing)):
        build_report(missing, None, tmp_path / "out")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RecordsError, match="no records under"):
        build_report(empty, None, tmp_path / "out")


def test_missing_model_dir(tmp_path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(SelectorError, match=str(missing)):
        build_report(SLICE, missing, tmp_path / "out")


def _parser() -> argparse.ArgumentParser:
    # The report command alone, as algosel.cli.build_parser adds it.
    parser = argparse.ArgumentParser(prog="algosel")
    add_report_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_command_line(model_dir, tmp_path, capsys) -> None:
    """The report's two lines of the parser; a report with a model through the command line is
    tests/test_tutorial.py's (``algosel report --data .. --model .. --out ..``), the one here compares the baselines."""
    out = tmp_path / "cli"
    args = _parser().parse_args(["report", "--data", str(SLICE), "--model", str(model_dir), "--out", str(out)])
    assert (args.model, args.worst) == (str(model_dir), DEFAULT_WORST)
    args = _parser().parse_args(["report", "--data", str(SLICE), "--out", str(out), "--worst", "2"])
    assert args.func(args) == 0
    assert f"wrote {out / 'index.html'}" in capsys.readouterr().out
    assert (out / "index.html").is_file()

    args = _parser().parse_args(["report", "--data", str(SLICE), "--out", str(out), "--selectors", "heuristic_a,nope"])
    with pytest.raises(ReportError, match="'nope'"):
        args.func(args)
    with pytest.raises(SystemExit):
        _parser().parse_args(["report", "--data", str(SLICE), "--out", str(out), "--worst", "0"])
    assert "expected a positive integer, got '0'" in capsys.readouterr().err


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def _screenshot(index: Path, shot: Path) -> np.ndarray:
    """The page as headless Chromium draws it in a 1280 x 2400 window, RGB in 0..1."""
    from PIL import Image

    # The flags keep Chromium off the network, which this machine does not have (it would retry for long).
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         f"--user-data-dir={shot.parent / 'profile'}", "--window-size=1280,2400", f"--screenshot={shot}",
         index.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return np.asarray(Image.open(shot).convert("RGB"), dtype=float) / 255


def _coloured_share(rgb: np.ndarray) -> float:
    """Share of strongly coloured pixels: text and tables are grey, only the figures' lines have colour."""
    return float((rgb.max(axis=2) - rgb.min(axis=2) > 0.3).mean())


#: Seen: 0.002 (the full report) to 0.01 (the slice) with the figures, whose lines are thin; 0.00001 without.
COLOURED = 0.0005
chromium = pytest.mark.skipif(_chromium() is None, reason="no headless Chromium on this machine")


@chromium
def test_page_renders_in_chromium(with_model, tmp_path) -> None:
    rgb = _screenshot(with_model, tmp_path / "page.png")
    assert rgb.shape == (2400, 1280, 3)
    assert rgb.mean(axis=2).std() > 0.1  # the page is drawn, not blank
    assert _coloured_share(rgb) > COLOURED  # and so are its figures


@chromium
def test_page_without_its_figures_has_no_colour(with_model, tmp_path) -> None:
    """The check above can fail: the same page without its PNGs next to it shows only grey alt text."""
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(with_model, alone / "index.html")
    assert _coloured_share(_screenshot(alone / "index.html", tmp_path / "page.png")) < COLOURED


def test_report_builds_from_the_shipped_records_and_model(tmp_path) -> None:
    """The report of the README's main job, on the full shipped H200 records and model. (The legacy section from
    both APIs' records: tests/test_legacy.py's report of the two slices; on the full shipped datasets, the
    notebook's legacy figure, tests/test_notebook.py.)"""
    from matplotlib.image import imread

    sweeps = REPO / "data" / "sweeps"
    index = build_report(sweeps / "h200", REPO / "models" / "joint-h100-h200-cudnn91900", tmp_path / "main")
    page = index.read_text()
    assert "1,212 held-out problems" in page
    pngs = list((tmp_path / "main").glob("*.png"))
    assert pngs and all(imread(png).shape[0] > 200 for png in pngs)


def test_worst_case_tables_fit_a_1280_px_window(with_model) -> None:
    """Problem keys and candidate ids (up to ~80 characters without a space) ran the worst-case tables off the
    right edge of a 1280-px window, hiding the best candidate and its time. Each worst-case table now has a fixed
    layout at the width of the page, column widths that sum to 100%, and ids broken anywhere: whatever its content,
    the table is as wide as the page, never wider."""
    import re

    from algosel.study.report_html import WORST_COLUMN_WIDTHS

    page = with_model.read_text(encoding="utf-8")
    style = page[page.index("<style>") : page.index("</style>")]
    assert re.search(r"table\.worst \{ table-layout: fixed; width: 100%; \}", style)
    assert re.search(r"table\.worst td, table\.worst th \{[^}]*word-break: break-all", style)
    assert "nowrap" not in style
    tables = re.findall(r'<table[^>]*class="dataframe worst"[^>]*>(.*?)</table>', page, re.S)
    assert tables, "the page has worst-case tables"
    for table in tables:
        widths = [float(w) for w in re.findall(r'<col style="width: ([\d.]+)%">', table)]
        header = re.findall(r"<th>(.*?)</th>", table.split("</thead>")[0])
        assert header == list(WORST_COLUMN_WIDTHS)
        assert len(widths) == len(header) and sum(widths) == pytest.approx(100)
        # Every long cell (a key or an id) lies in a column given at least a fifth of the page.
        for row in re.findall(r"<tr>(.*?)</tr>", table.split("</thead>")[1], re.S):
            cells = re.findall(r"<td>(.*?)</td>", row, re.S)
            for text, width in zip(cells, widths):
                assert len(text) <= 12 or width >= 10, (text, width)
