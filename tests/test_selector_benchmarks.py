"""The selector's CPU benchmarks on small inputs: benchmarks/time_ratio.py on the committed slice of the H200
records, and benchmarks/switch_rule.py's share of the recorded savings a least gain keeps."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, SLICE


def test_time_ratio_scores_both_models_on_the_held_out_rows(tmp_path):
    out = tmp_path / "time_ratio.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "time_ratio.py"), "--data", str(SLICE), "--out", str(out),
           "--unseen", str(REPO / "data" / "sweeps" / "h200-mynet")]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    result = json.loads(out.read_text())
    ratio_rows = result["time_model_ratio"]["rows"]
    # the ratio is judged on the same rows for every model: timed candidates other than PyTorch's default
    assert 0 < ratio_rows < result["time_model_absolute"]["rows"]
    for key in ("time_model_absolute", "time_model_ratio", "ratio_model", "ratio_model_2x_trees"):
        stats = result[key]
        assert math.isfinite(stats["median"]) and 0 <= stats["median"] <= stats["p90"], key
    assert result["ratio_model"]["rows"] == result["ratio_model_2x_trees"]["rows"] == ratio_rows
    assert result["ratio_model_2x_trees"]["trees"] == 2 * result["ratio_model"]["trees"]
    assert "ratio_model " in res.stdout and "median" in res.stdout
    # the same fits judged on a dataset none trained on, with what a switch rule sees
    for label in ("held_out", "unseen"):
        for key in ("time_model_ratio", "ratio_model"):
            view = result[label][key]
            assert view["predicted_faster"] >= 0 and view["rows"] > 0, (label, key)
            assert view["measured_faster"] is None or 0 <= view["measured_faster"] <= 1
    assert result["held_out"]["time_model_ratio"]["rows"] == ratio_rows
    assert result["unseen"]["absolute"]["rows"] == 7156  # every MyNet record is timed
    assert "unseen: " in res.stdout


def test_switch_view_counts_the_predicted_switches_that_hold(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import numpy as np
    import time_ratio

    predicted = np.log2([0.5, 0.6, 0.9, 0.4])  # three predicted >= 1.5x faster (ratios <= 1/1.5)
    measured = np.log2([0.8, 1.2, 0.5, 0.5])
    view = time_ratio.switch_view(predicted, measured)
    assert view["predicted_faster"] == 3
    assert view["measured_faster"] == pytest.approx(2 / 3)
    assert view["measured_geomean"] == pytest.approx((0.8 * 1.2 * 0.5) ** (1 / 3))
    assert time_ratio.switch_view(np.log2([1.0]), np.log2([0.5]))["measured_faster"] is None


class _Catalogue:
    def __init__(self, rows):
        self.frame = pd.DataFrame(rows, columns=["problem_key", "candidate_id", "status", "time_ms_median"])


class _Selector:
    def __init__(self, rows):
        self.catalogue = _Catalogue(rows)


def test_savings_kept_counts_the_recorded_gains_at_least_the_floor(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import switch_rule

    sel = _Selector([
        ("a", "pytorch:default", "ok", 0.100), ("a", "cudnn:x", "ok", 0.050),  # saves 50 us
        ("b", "pytorch:default", "ok", 0.020), ("b", "cudnn:y", "ok", 0.010),  # saves 10 us
        ("c", "pytorch:default", "ok", 0.010), ("c", "cudnn:z", "ok", 0.012),  # the default is best: saves 0
        ("d", "pytorch:default", "ok", 0.040), ("d", "cudnn:w", "wrong_result", 0.001),  # failed rows do not count
    ])  # fmt: skip
    assert switch_rule.savings_kept(sel, 0.0) == {"problems": 4, "savings_kept": 1.0, "switched": 0.5}
    kept = switch_rule.savings_kept(sel, 20.0)
    assert kept["savings_kept"] == pytest.approx(50 / 60) and kept["switched"] == pytest.approx(1 / 4)
    assert switch_rule.savings_kept(sel, 51.0)["savings_kept"] == 0.0


def test_switch_rule_scores_far_margins_on_held_out_and_on_an_unseen_dataset(monkeypatch):
    """Held out, distances are taken to the training shapes' problems (each held-out problem is in the full
    catalogue); never switching far switches no more than the runtime's 3x, which switches no more than 1.5x; an
    unseen dataset is scored by its own records."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import warnings

    import switch_rule

    from algosel.learn.models import load_default
    from algosel.problem import ConvProblem
    from algosel.records.catalogue import Catalogue
    from algosel.records.store import load_records
    from algosel.runtime import executor

    for name in ("MIN_PREDICTED_RATIO", "MIN_PREDICTED_RATIO_FAR"):  # score() sets them: restored after the test
        monkeypatch.setattr(executor, name, getattr(executor, name))
    warnings.simplefilter("ignore")
    sel = load_default()
    held = switch_rule.held_out_problems(sel)[:150]
    reference = switch_rule.training_catalogue(sel)
    assert sel.records_distance(held[0]) == 0.0 < reference.distance(held[0])
    switched = [switch_rule.score(sel, held, 1.5, 20.0, far, reference)["switched"] for far in (1.5, 3.0, math.inf)]
    assert switched[0] >= switched[1] >= switched[2]
    # the runtime's lists: the nearest training problem's, the held-out problem's own only where worth a look
    own = switch_rule.score(sel, held, 1.5, 20.0, 3.0, reference)
    nearest = switch_rule.score(sel, held, 1.5, 20.0, 3.0, reference, nearest_first=True)
    assert own["own_lists_ranked"] == 1.0 and 0.0 < nearest["own_lists_ranked"] < 1.0
    assert nearest["problems"] == own["problems"] and nearest["switched"] <= own["switched"] + 0.02
    mynet = Catalogue.from_records(load_records(REPO / "data" / "sweeps" / "h200-mynet")[0])
    problems = [ConvProblem.from_key(k) for k in sorted(mynet.frame["problem_key"].unique())]
    r = switch_rule.score(sel, problems, 1.5, 20.0, 3.0, None, mynet)
    assert r["problems"] == len(problems) == 126 and r["far_margin"] == 3.0


def _rows(problem, *cands):
    return [{"problem_key": problem, "candidate_id": c, "space": c.split(":")[0], "engine_id": e, "status": "ok",
             "time_ms_median": t, "host_overhead_us": h} for c, e, t, h in cands]  # fmt: skip


def test_host_cost_records_measures_each_candidates_host_time_over_the_defaults(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import host_cost_records as hcr

    frame = pd.DataFrame(
        _rows(
            "p1",
            ("pytorch:default", 0, 0.100, 20.0),
            ("cudnn:eng3_a", 3, 0.050, 50.0),
            ("cudnn:eng9_b", 9, 0.090, 21.0),
        )
        + _rows("p2", ("pytorch:default", 0, 0.030, 25.0), ("cudnn:eng3_a", 3, 0.028, 49.0))
        + _rows("p3", ("cudnn:eng3_a", 3, 0.010, 30.0))  # no default timed: left out
    )
    rows = hcr.host_extra(frame)
    assert sorted(rows["problem_key"].unique()) == ["p1", "p2"]
    engines = hcr.by_engine(rows)
    assert engines.loc[("cudnn", 3), "median_us"] == pytest.approx(27.0)  # +30 and +24
    assert engines.loc[("cudnn", 9), "records"] == 1
    sw = hcr.switches(rows, 20.0)  # p1's fastest saves 50 us; p2's 2 us
    assert list(sw["problem_key"]) == ["p1"] and sw["extra_us"].iloc[0] == pytest.approx(30.0)


def test_verify_skip_scores_a_filter_by_what_it_times_and_what_it_loses(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import verify_skip

    rows = [
        {"problem": "a", "predicted_default_ms": 0.05, "predicted_gain_us": 30.0, "found_gain_us": 40.0},
        {"problem": "b", "predicted_default_ms": 0.05, "predicted_gain_us": 2.0, "found_gain_us": 0.0},
        {"problem": "c", "predicted_default_ms": 0.50, "predicted_gain_us": 1.0, "found_gain_us": 60.0},
        {"problem": "d", "predicted_default_ms": 0.02, "predicted_gain_us": 5.0, "found_gain_us": 25.0},
    ]
    s = verify_skip.score(rows, 2.0, 0.1, 20.0)  # times a (gain) and c (long default)
    assert s["timed"] == 0.5 and s["gain_kept"] == pytest.approx(100 / 125)
    assert (s["switches_lost"], s["switches"], s["largest_lost_us"]) == (1, 3, 25.0)
    assert verify_skip.score(rows, 2.0, math.inf, 20.0)["timed"] == 0.25  # without the long-default rule: a only


def test_verify_skip_scores_pruned_shortlists_by_candidates_timed_and_gain_found(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import verify_skip

    from algosel.runtime import executor

    rows = [  # a: the second candidate, predicted slower than the default, is the one that saves 50 us
        {"ids": ["x", "y"], "default_ms": 0.10, "predicted": {"x": 0.08, "y": 0.12, "pytorch:default": 0.10},
         "recorded": {"x": 0.09, "y": 0.05}},
        {"ids": ["x", "y"], "default_ms": 0.10, "predicted": {"x": 0.20, "y": 0.30, "pytorch:default": 0.10},
         "recorded": {"x": 0.07, "y": None}},  # b: both predicted slower; the first is kept and saves 30 us
    ]  # fmt: skip
    whole = verify_skip.prune_score(rows, math.inf, 20.0)
    assert whole == {"ratio": math.inf, "per_problem": 2.0, "found_us": pytest.approx(80.0), "switches": 2}
    pruned = verify_skip.prune_score(rows, 1.0, 20.0)
    assert pruned["per_problem"] == 1.0 and pruned["found_us"] == pytest.approx(30.0) and pruned["switches"] == 1
    assert executor.VERIFY_MAX_PREDICTED_RATIO == 1.0  # scoring leaves the runtime's ratio as it is


def test_verify_skip_counts_what_verify_mode_times_on_a_layers_file(tmp_path):
    layers = tmp_path / "net.csv"
    layers.write_text(
        "network,layer,n,c,k,h,w,r,s,pad_h,pad_w,stride_h,stride_w,dilation_h,dilation_w,groups,size\n"
        "net,a,8,24,40,17,17,3,3,1,1,1,1,1,1,1,17x17\n"
        "net,b,8,24,40,17,17,3,3,1,1,1,1,1,1,1,17x17\n"  # the same shape again: counted once
    )
    cmd = [sys.executable, str(REPO / "benchmarks" / "verify_skip.py"), "--layers", str(layers)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in res.stdout.splitlines() if line.startswith("| net |")]
    assert [r[1].strip() for r in rows] == ["float32, nchw", "float16, nhwc"]
    for r in rows:
        new, before, after = (int(x) for x in r[2:])
        assert new == 3 and 0 <= after <= before <= new  # three directions of one unrecorded shape
    bad = subprocess.run([*cmd[:2], "--layers", str(tmp_path / "missing.csv")], capture_output=True, text=True,
                         timeout=300, check=False)  # fmt: skip
    assert bad.returncode == 2 and "missing.csv" in bad.stderr and "Traceback" not in bad.stderr


def test_host_cost_records_scores_the_nearest_problems_host_times_on_held_out_problems():
    cmd = [sys.executable, str(REPO / "benchmarks" / "host_cost_records.py"), "--transfer"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "candidates of held-out problems" in res.stdout and "from the nearest training problem" in res.stdout
    bad = subprocess.run([*cmd, "--model", "/nonexistent"], capture_output=True, text=True, timeout=600, check=False)
    assert bad.returncode == 2 and "/nonexistent" in bad.stderr and "Traceback" not in bad.stderr


def test_neighbour_feature_takes_each_problems_nearest_among_the_training_problems_never_itself(monkeypatch):
    """benchmarks/neighbour_feature.py on a small dataset: a training problem's nearest is another training problem
    of its kind, a held-out problem's a training one, so that no held-out measurement reaches the features; both
    rankers are scored on the same held-out problems."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import neighbour_feature as nf

    from algosel.learn.evaluate import Prepared, is_test_shape
    from algosel.learn.features import FEATURE_NAMES
    from algosel.learn.ranker import RankerParams
    from algosel.records.store import load_records, main_environment

    frame, envs = load_records(REPO / "data" / "sweeps" / "h200-mynet")
    frame, _ = main_environment(frame, envs)
    prep = Prepared.build(frame, envs)
    test = is_test_shape(prep.shape)
    assert 0 < test.sum() < len(test)
    extra = nf.neighbour_columns(prep, test)
    assert extra.shape == (len(prep.data), len(nf.NEIGHBOUR_FEATURES))
    distance = extra[:, 2]
    assert np.nanmin(distance) > 0  # never the problem itself (distance 0)
    # the nearest problem's best candidate has log2 ratio 0 and rank 0 there, and ratios lie in [0, 6]
    ratio = extra[:, 0]
    assert np.nanmin(ratio) == 0.0 and np.nanmax(ratio) <= nf.FAILED_LOG2_RATIO
    assert np.array_equal(np.isnan(ratio), np.isnan(extra[:, 1]))
    params = RankerParams(n_estimators=5, num_leaves=7, num_threads=1)
    base = nf.held_out_score(prep, prep.X, list(FEATURE_NAMES), test, params)
    more = nf.held_out_score(prep, np.column_stack([prep.X, extra]), [*FEATURE_NAMES, *nf.NEIGHBOUR_FEATURES], test,
                             params)  # fmt: skip
    assert base["problems"] == more["problems"] > 0 and base["geomean"] >= 1.0 and more["geomean"] >= 1.0
    assert 0.0 <= base["within_5pct"] <= 1.0 and base["total"] >= 1.0


def test_verify_far_scores_each_rule_on_a_swept_network_the_records_lack():
    """benchmarks/verify_far.py on MyNet's sweep (the tutorial's network, in no dataset the shipped model is trained
    on) with its calls per step: the far rule (far problems: the live list, unfiltered) times more problems than the
    rule before it, the executor's (every problem: the live list, unfiltered) at least as many, and each finds what
    timing can (never above PyTorch's default, never below the best)."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "verify_far.py"), str(REPO / "data" / "sweeps" / "h200-mynet"),
           "--layers", str(REPO / "benchmarks" / "results" / "mynet-h200-20261201" / "mynet.csv")]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert lines[0].startswith("126 problems the records lack")
    rules, costs = {}, {}
    for line in lines:
        if "timed" in line:
            name, rest = line.strip().split("  timed")
            f = rest.replace("(", " ").replace(")", " ").split()
            rules.setdefault(name.strip(), []).append((int(f[0]), int(f[8]), float(f[12]), float(f[15]), float(f[19])))
            costs.setdefault(name.strip(), []).append((int(f[2]), float(f[4])))  # candidates built, timing s
    far_rules = [f"executor, far pruned at {r:g}x" for r in (1.0, 1.5, 2.0, 3.0, math.inf)]  # verify_far.FAR_RATIOS
    list_rules = [f"executor, whole list from {ms:g} ms" for ms in (0.1, 0.25, 0.5, 1.0, math.inf)]
    mode_rules = ["executor, live lists A", "executor, live lists A+FALLBACK", "executor, live lists A+B+FALLBACK"]
    assert set(rules) == {"nearest list, filter everywhere", "far rule (nearest list near)", "executor",
                          "executor, unpruned", *far_rules, *list_rules, *mode_rules}  # fmt: skip
    assert all(len(v) == 2 for v in rules.values())  # all problems, then RegNetY's
    for _, live, found_vs_default, found_vs_best, best_vs_default in (r for v in rules.values() for r in v):
        assert 0 <= live and found_vs_default <= 1.0 and found_vs_best >= 1.0
        assert found_vs_default == pytest.approx(found_vs_best * best_vs_default, abs=2e-3)
    # a larger pruning ratio far from the records times a superset: more candidates built, timing at least as
    # long, and at least as much found; the executor's rule is that of its own ratio
    for i in range(2):
        built = [costs[r][i][0] for r in far_rules]
        spent = [costs[r][i][1] for r in far_rules]
        found = [rules[r][i][2] for r in far_rules]
        assert built == sorted(built) and spent == sorted(spent) and found == sorted(found, reverse=True)
        assert all(t > 0 for t in spent) and built[0] > 0
    from algosel.runtime import executor

    own = f"executor, far pruned at {executor.VERIFY_MAX_PREDICTED_RATIO_FAR:g}x"
    assert rules["executor"] == rules[own] and costs["executor"] == costs[own]
    # a lower threshold for timing the rest of the list: more built, at least as much found
    for i in range(2):
        built = [costs[r][i][0] for r in list_rules]
        found = [rules[r][i][2] for r in list_rules]
        assert built == sorted(built, reverse=True) and found == sorted(found)
    for own in (f"executor, whole list from {executor.VERIFY_WHOLE_LIST_MS:g} ms",
                f"executor, live lists {'+'.join(m.upper() for m in executor.VERIFY_LIVE_MODES)}"):  # fmt: skip
        assert rules["executor"] == rules[own] and costs["executor"] == costs[own]
    # live lists counted as queried: the far rule queries only the far problems it times; the executor's rule
    # queries every problem not too short to pay (it times those whose list has a candidate besides the default)
    assert all(live <= timed for timed, live, *_ in rules["far rule (nearest list near)"])
    assert all(live >= timed for timed, live, *_ in rules["executor"] + rules["executor, unpruned"])
    before, far, now = (rules[k] for k in ("nearest list, filter everywhere", "far rule (nearest list near)",
                                           "executor"))  # fmt: skip
    assert before[0][1] == 0 and far[0][0] > before[0][0] and far[0][1] > 0 and now[0][0] >= far[0][0]
    assert far[1][2] < before[1][2] and now[1][2] <= far[1][2]
    assert now[1][2] < before[1][2]  # MyNet: gains the nearest list's filter missed are found


def test_verify_far_can_let_the_model_score_every_listed_config():
    """``--score-every-listed``: configs only FALLBACK lists (MyNet's sweep holds some) are ranked too, so the
    shortlists, and the candidates built, differ from the model's own rule."""

    def built(*extra):
        cmd = [sys.executable, str(REPO / "benchmarks" / "verify_far.py"),
               str(REPO / "data" / "sweeps" / "h200-mynet"), *extra]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
        assert res.returncode == 0, res.stderr[-2000:]
        line = next(x for x in res.stdout.splitlines() if x.strip().startswith("executor  "))
        return int(line.split("built")[1].split()[0])

    assert built("--score-every-listed") != built()


def test_verify_fars_timing_cost_follows_verify_modes_timer(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import verify_far

    times = {"pytorch:default": 1.0, "a": 0.5, "b": 2.0}
    # the default: 3 runs + 3 repeats (1 ms budget, at least 3); a: 3 + 3; b (4x the best so far): its 3 runs only
    assert verify_far.timing_cost_ms(times, ["a", "b", "not built"]) == pytest.approx(6 * 1.0 + 6 * 0.5 + 3 * 2.0)
    assert verify_far.timing_cost_ms(times, []) == pytest.approx(6.0)
    assert verify_far.FAR_RATIOS == (1.0, 1.5, 2.0, 3.0, math.inf)


def test_verify_vs_sweep_compares_verify_modes_timing_with_the_sweeps():
    """benchmarks/verify_vs_sweep.py on the committed float32 zoo run and the zoo's sweep: the pairs both hold, and
    their agreement (what docs/hook.md quotes)."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "verify_vs_sweep.py"),
           str(REPO / "benchmarks" / "results" / "zoo-h200-20261203-float32-02abf33.jsonl"),
           str(REPO / "data" / "sweeps" / "h200-zoo-f32")]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("248 pairs; |log(verify / sweep)| median 0.0096, p90 0.0424; within 3%: 0.823")


def test_rank_vs_time_scores_every_picker_out_of_fold_on_the_same_problems(tmp_path):
    out = tmp_path / "rank_vs_time.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "rank_vs_time.py"), "--data", str(SLICE), "--folds", "2",
           "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    pickers = json.loads(out.read_text())["pickers"]
    assert set(pickers) == {"ranker", "time", "time_in_top3", "blend_0.5", "blend_1", "blend_2"}
    problems = {r["problems"] for r in pickers.values()}
    assert len(problems) == 1 and problems.pop() > 100  # every picker on the training shapes' problems
    for name, r in pickers.items():
        assert r["geomean"] >= 1 and r["total_time_ratio"] >= 1 and 0 <= r["within_5pct"] <= 1, name
        assert f"{name} " in res.stdout


def test_rank_vs_time_standardises_per_problem_and_keeps_the_rankers_top_three(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import rank_vs_time

    keys = np.array(["a", "a", "a", "b", "b"])
    z = rank_vs_time._per_problem_z(keys, np.array([1.0, 2.0, 3.0, 5.0, 5.0]))
    assert z == pytest.approx([-1.0, 0.0, 1.0, 0.0, 0.0])  # sample std of 1, 2, 3 is 1; b's values are equal
    keys = np.array(["a"] * 5)
    scores = np.array([0.1, 0.9, 0.5, 0.7, 0.8])
    shortlist = np.array([True, True, True, True, False])  # the best-scored row is off the shortlist
    assert rank_vs_time._top3_mask(keys, scores, shortlist).tolist() == [False, True, True, True, False]


def _refit_script_error(script: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize("script", ["rank_vs_time.py", "ranker_settings.py"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--folds", "1"], "--folds must be at least 2, got 1"),
        (["--data", "no/such/dir"], "--data no/such/dir does not exist"),
        (["--params-from", "data"], "--params-from data holds no model (no manifest.json)"),
    ],
)
def test_the_refitting_benchmarks_say_in_one_line_what_they_cannot_use(script, args, message):
    res = _refit_script_error(script, args)
    assert res.returncode == 2 and res.stderr.strip() == f"{script}: {message}", res.stderr


def test_family_loss_shares_the_grids_loss_by_family(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import family_loss

    from algosel.problem import ConvProblem

    pointwise = ConvProblem(8, 64, 32, 28, 28, 1, 1).key
    conv3x3 = ConvProblem(8, 64, 32, 28, 28, 3, 3, 1, 1).key
    suite = ConvProblem(8, 64, 32, 14, 14, 1, 1).key
    table = pd.DataFrame(
        {"source": ["grid", "grid:loss", "suite:resnet50"], "best": [1.0, 1.0, 1.0], "model": [4.0, 2.0, 8.0]},
        index=[pointwise, conv3x3, suite],
    )
    out = family_loss.family_losses(table)
    assert list(out.index) == ["pointwise", "conv3x3"]  # the suite's problem is not the grid's
    assert out.at["pointwise", "share"] == pytest.approx(2 / 3)  # log 4 = 2 log 2 of the grid's 3 log 2
    assert out.at["conv3x3", "loss_mean"] == pytest.approx(np.log(2.0))
    assert out["problems"].sum() == 2


def test_ranker_settings_scores_each_setting_and_seed_both_ways_on_the_same_problems(tmp_path):
    from algosel.learn.artifact import read_manifest

    out = tmp_path / "settings.json"
    leaves = read_manifest(REPO / "models" / "h200-cudnn91900")["params"]["num_leaves"]  # what --params-from sets
    cmd = [sys.executable, str(REPO / "benchmarks" / "ranker_settings.py"), "--data", str(SLICE), "--folds", "2",
           "--seeds", "0,1", "--threads", "1", "--setting", 'small={"n_estimators": 3, "num_leaves": 3}',
           "--setting", f'same={{"num_leaves": {leaves}}}', "--out", str(out)]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["setting"], r["seed"]) for r in rows] == [
        (s, seed) for s in ("base", "small", "same") for seed in (0, 1)
    ]
    assert rows[2]["params"] == {"n_estimators": 3, "num_leaves": 3}
    assert len({r["cv_problems"] for r in rows}) == 1 and len({r["held_out_problems"] for r in rows}) == 1
    for r in rows:
        assert r["cv_geomean"] >= 1 and r["held_out_geomean"] >= 1 and r["held_out_total_time_ratio"] >= 1
        assert 0 <= r["cv_within_5pct"] <= 1
    scores = [{k: v for k, v in r.items() if k.startswith(("cv_", "held_out_"))} for r in rows]
    # a setting is applied on top of --params-from's: one that sets what it already has scores the same, seed for
    # seed (training is deterministic), and one that changes the trees scores otherwise
    assert scores[4:6] == scores[0:2] and scores[2:4] != scores[0:2]
    means = [line for line in res.stdout.splitlines() if " mean |" in line]
    assert [m.split()[0] for m in means] == ["base", "small", "same"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--setting", "lr0.1"], "ranker_settings.py: --setting 'lr0.1' is not NAME=JSON"),
        (
            ["--setting", "x={lr}"],
            "ranker_settings.py: --setting x: '{lr}' is not JSON (Expecting property name enclosed in double quotes)",
        ),
        (["--setting", 'x={"lr": 1}'], "ranker_settings.py: --setting x: 'lr' is not a RankerParams field to set"),
        (["--seeds", "0,a"], "ranker_settings.py: --seeds '0,a' is not comma-separated integers"),
    ],
)
def test_ranker_settings_says_in_one_line_what_it_cannot_use(args, message):
    res = _refit_script_error("ranker_settings.py", args)
    assert res.returncode == 2 and res.stderr.strip().startswith(message), res.stderr
