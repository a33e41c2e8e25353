"""The analyst's report: an HTML page with plots comparing selectors on sweep records (``algosel report``).

:func:`build_report` writes ``index.html`` and the PNG figures it shows (side by side in one directory, linked by
relative paths, so the directory can be copied or served as it is):

- the distribution (CDF) of each selector's time ratio to the best measured candidate;
- geomean, p95, worst ratio, share within 5% of best and top-1 share, overall, per direction and per dtype
  (:func:`algosel.records.analysis.comparison_table`);
- the worst problems of each selector, with the candidate it chose and the best one;
- whole-network fwd + bwd totals of the network suites in the records (:func:`algosel.learn.evaluate.network_totals`).

With a model directory the model's picks are computed as ``algosel evaluate`` does (:func:`algosel.learn.evaluate.
held_out_table`): on the held-out test shapes only, and every selector is compared on those same problems.
Without one the model is left out and every problem of the records is used.

Three modules make it, one idea each: :mod:`~algosel.study.report_data` (what is compared, computed once),
:mod:`~algosel.study.report_figures` (the plots) and :mod:`~algosel.study.report_html` (the page); this one writes
the files (the command line's ``algosel report`` is :mod:`algosel.cli.study`'s). Heavy modules (pandas, matplotlib,
LightGBM) are imported inside the functions that need them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from algosel.study.report_data import (
    DEFAULT_WORST,
    ReportError,
    check_selectors,
    compare,
)
from algosel.study.report_figures import cdf_figure, legacy_figure, network_figure
from algosel.study.report_html import render_page

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CDF_PNG, WHOLE_NETWORKS_PNG, HELD_OUT_NETWORKS_PNG = "cdf.png", "network_totals.png", "network_totals_held_out.png"
LEGACY_PNG = "legacy.png"

#: Every file ``algosel report`` writes into its folder.
REPORT_FILES: tuple[str, ...] = ("index.html", CDF_PNG, WHOLE_NETWORKS_PNG, HELD_OUT_NETWORKS_PNG, LEGACY_PNG)


def build_report(
    data_dir: str | Path | Sequence[str | Path],
    model_dir: str | Path | None,
    out_dir: str | Path,
    selectors: Iterable[str] | None = None,
    worst: int = DEFAULT_WORST,
    overwrite: bool = False,
    force: bool = False,
) -> Path:
    """Write ``out_dir/index.html`` and its PNG figures; return the path of ``index.html``.

    ``data_dir``: a records directory (or several); ``model_dir``: a model directory, or None to compare the
    baselines alone on every problem; ``selectors``: names of :data:`KNOWN_SELECTORS` (default
    :data:`DEFAULT_SELECTORS`); ``worst``: problems listed per selector; ``force``: use a model made for another GPU
    or cuDNN than the records'. Errors are ValueErrors with one-line messages naming the bad value (see
    :func:`compare`).

    The files (:data:`REPORT_FILES`) are written together once all are made (:func:`algosel.outputs.write_output_dir`):
    a run that fails or is interrupted leaves ``out_dir`` as it was, and no figure of an earlier run stays beside
    the new page. A file of those names that ``algosel report`` did not write there is refused before any work
    (:class:`~algosel.outputs.OutputError`) unless ``overwrite``; other files of the folder are left alone.
    """
    import io

    from algosel.outputs import check_output_dir, write_output_dir

    if isinstance(worst, bool) or not isinstance(worst, int) or worst < 1:
        raise ReportError(f"worst must be a positive integer, got {worst!r}")
    check_selectors(selectors, with_model=model_dir is not None)  # before any loading
    out = Path(out_dir)
    check_output_dir(out, "report", REPORT_FILES, overwrite=overwrite)  # before the seconds of loading, not after
    cmp = compare(data_dir, model_dir, selectors, force=force)
    files: dict[str, bytes] = {}

    def save(fig: Figure, name: str) -> None:
        png = io.BytesIO()
        fig.savefig(png, dpi=110, format="png")
        files[name] = png.getvalue()

    scope = "held-out problems" if cmp.held_out else "problems (all of the records)"
    figures = {"cdf": CDF_PNG, "whole": WHOLE_NETWORKS_PNG}
    save(cdf_figure(cmp.table, cmp.selectors, f"{len(cmp.table):,} {scope}"), CDF_PNG)
    baselines = [s for s in cmp.selectors if s != "model"]
    if baselines:
        save(network_figure(cmp.whole_networks, baselines, "whole networks, every recorded call"), WHOLE_NETWORKS_PNG)
    if cmp.held_out_networks is not None:
        figures["held"] = HELD_OUT_NETWORKS_PNG
        figure = network_figure(cmp.held_out_networks, cmp.selectors, "calls of held-out shapes only")
        save(figure, HELD_OUT_NETWORKS_PNG)
    if "best_legacy" in cmp.table:
        figures["legacy"] = LEGACY_PNG
        save(legacy_figure(cmp.table, "problems measured with both APIs"), LEGACY_PNG)
    data = [str(data_dir)] if isinstance(data_dir, (str, Path)) else [str(d) for d in data_dir]
    page = render_page(cmp, data, None if model_dir is None else str(model_dir), worst, figures)
    files["index.html"] = page.encode("utf-8")
    write_output_dir(out, files, "report", REPORT_FILES, overwrite=overwrite)
    return out / "index.html"
