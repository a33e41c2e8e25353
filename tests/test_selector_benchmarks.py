"""benchmarks/ranker_settings.py (the ranker's settings over seeds) on the committed slice of the H200 records; then
tests of archived studies (benchmarks/archive/) that also pin the runtime's behaviour on real records, kept until
library tests take that over."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from conftest import REPO, SLICE

#: The archived studies the tests at the end still run (frozen scripts: see benchmarks/archive/README.md).
ARCHIVE = REPO / "benchmarks" / "archive"


def _refit_script_error(script: str, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--folds", "1"], "--folds must be at least 2, got 1"),
        (["--data", "no/such/dir"], "--data no/such/dir does not exist"),
        (["--params-from", "data"], "--params-from data holds no model (no manifest.json)"),
    ],
)
def test_ranker_settings_says_in_one_line_which_records_folds_or_model_it_cannot_use(args, message):
    res = _refit_script_error("ranker_settings.py", args)
    assert res.returncode == 2 and res.stderr.strip() == f"ranker_settings.py: {message}", res.stderr


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


# --- Tests of archived studies (benchmarks/archive/) that also pin the runtime's behaviour on the shipped model and
# real records: the switch rule's far margin on held-out problems (switch_rule.py), verify mode's pruning ratio of 1
# (verify_skip.py), verify mode's rules far from the records on MyNet's sweep and the repeats of its timer
# (verify_far.py). Not deleted with their scripts, to be moved into library tests or dropped; skipped meanwhile: the
# archived scripts set and read module constants of algosel.runtime.executor (MIN_PREDICTED_RATIO, pruned_shortlist,
# NEAR_RECORDS_DISTANCE, VERIFY_TIMER, ...) that the runtime's SwitchPolicy replaced at 3a2b49a, and are frozen.
archived_runtime_pin = pytest.mark.skip(
    reason="archived study predates SwitchPolicy (3a2b49a); what it pins belongs in library tests"
)


@archived_runtime_pin
def test_switch_rule_scores_far_margins_on_held_out_and_on_an_unseen_dataset(monkeypatch):
    """Held out, distances are taken to the training shapes' problems (each held-out problem is in the full
    catalogue); never switching far switches no more than the runtime's 3x, which switches no more than 1.5x; an
    unseen dataset is scored by its own records."""
    monkeypatch.syspath_prepend(str(ARCHIVE))
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


@archived_runtime_pin
def test_verify_skip_scores_pruned_shortlists_by_candidates_timed_and_gain_found(monkeypatch):
    monkeypatch.syspath_prepend(str(ARCHIVE))
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


@archived_runtime_pin
def test_verify_far_scores_each_rule_on_a_swept_network_the_records_lack():
    """benchmarks/verify_far.py on MyNet's sweep (the tutorial's network, in no dataset the shipped model is trained
    on) with its calls per step: the far rule (far problems: the live list, unfiltered) times more problems than the
    rule before it, the executor's (every problem: the live list, unfiltered) at least as many, and each finds what
    timing can (never above PyTorch's default, never below the best)."""
    cmd = [sys.executable, str(ARCHIVE / "verify_far.py"), str(REPO / "data" / "sweeps" / "h200-mynet"),
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


@archived_runtime_pin
def test_verify_fars_timing_cost_follows_verify_modes_timer(monkeypatch):
    monkeypatch.syspath_prepend(str(ARCHIVE))
    import verify_far

    times = {"pytorch:default": 1.0, "a": 0.5, "b": 2.0}
    # the default: 3 runs + 3 repeats (1 ms budget, at least 3); a: 3 + 3; b (4x the best so far): its 3 runs only
    assert verify_far.timing_cost_ms(times, ["a", "b", "not built"]) == pytest.approx(6 * 1.0 + 6 * 0.5 + 3 * 2.0)
    assert verify_far.timing_cost_ms(times, []) == pytest.approx(6.0)
    assert verify_far.FAR_RATIOS == (1.0, 1.5, 2.0, 3.0, math.inf)
