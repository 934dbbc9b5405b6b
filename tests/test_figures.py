"""Figures return what they drew (figures.plotted); checked against the tables they were drawn from."""

import numpy as np
import pandas as pd
import pytest

from vlbind import figures

RNG = np.random.default_rng(0)
RUNS = ["seed0", "seed1"]


def eval_rows():
    rows = [{"variant": v, "run": r, "order": "fixed", "n_objects": n, "accuracy": RNG.uniform(0.1, 1.0),
             "in_distribution": n <= 8, "diverged": False, "converged": True, "convergence": ""}
            for v in ("text_only", "image_text") for r in RUNS for n in range(2, 13)]
    return pd.DataFrame(rows)


def test_fig3_draws_the_mean_accuracy_per_length_of_each_variant(tmp_path):
    df = eval_rows()
    drawn = figures.fig3(df, tmp_path / "fig3.pdf")
    assert (tmp_path / "fig3.pdf").stat().st_size > 0
    for v in ("text_only", "image_text"):
        line = drawn[(drawn["kind"] == "line") & drawn["series"].str.startswith(f"{v}: OOD")]
        expected = df[df["variant"] == v].groupby("n_objects")["accuracy"].mean()
        assert line["x"].tolist() == expected.index.tolist()
        assert line["y"].to_numpy() == pytest.approx(expected.to_numpy())
    chance = drawn[drawn["series"].str.startswith("chance")]
    assert chance["y"].to_numpy() == pytest.approx(1 / chance["x"].to_numpy())


def test_fig4_bars_are_the_mean_label_shares_per_layer(tmp_path):
    labels = ["positional", "color_key", "no_effect"]
    df = pd.DataFrame([{"variant": "text_only", "run": r, "layer": layer, "label": k, "fraction": RNG.uniform(),
                        "pairs_kept": 10} for r in RUNS for layer in range(3) for k in labels])
    drawn = figures.fig4(df, tmp_path / "fig4.pdf")
    for k in labels:
        bars = drawn[(drawn["kind"] == "bar") & (drawn["series"] == k)].sort_values("x")
        assert bars["y"].to_numpy() == pytest.approx(df[df["label"] == k].groupby("layer")["fraction"].mean())


def test_fig4_and_fig9_draw_each_run_at_the_position_its_label_was_read(tmp_path):
    """seed1 was labelled at the query token: its panel draws the query patches, seed0's the [ANSWER] ones."""
    labels = ["positional", "no_effect"]
    df = pd.DataFrame([{"variant": "image_text", "run": r, "position": p, "layer": layer, "label": k,
                        "fraction": RNG.uniform(), "pairs_kept": 10}
                       for r in RUNS for p in ("answer", "query") for layer in range(3) for k in labels])
    circuits = pd.DataFrame({"variant": ["image_text"] * 2, "run": RUNS, "circuit": ["Positional"] * 2,
                             "label_position": [np.nan, "query"], "spike_layer": [1, 2], "weak": [False, False]})
    for fig in (figures.fig4, figures.fig9):
        drawn = fig(df, tmp_path / f"{fig.__name__}.pdf", circuits=circuits)
        bars = drawn[(drawn["kind"] == "bar") & (drawn["series"] == "positional")]
        for run, position in zip(RUNS, ("answer", "query")):
            expected = df[(df["run"] == run) & (df["position"] == position) & (df["label"] == "positional")]
            panel = bars[bars["title"].str.contains(run) & bars["title"].str.contains(f"patched at {position}")]
            assert panel.sort_values("x")["y"].to_numpy() == pytest.approx(expected["fraction"].to_numpy())


def test_fig10_cells_are_the_mean_drop_of_each_role_edge(tmp_path):
    roles = ["context shape", "association item", "query"]
    df = pd.DataFrame([{"variant": "text_only", "run": r, "kind": "role", "source": s, "target": t,
                        "drop": RNG.uniform(), "baseline": 0.9, "accuracy": 0.5}
                       for r in RUNS for s in roles for t in roles if s != t]
                      + [{"variant": "text_only", "run": r, "kind": "matching", "source": "query",
                          "target": "context shape", "drop": 0.3, "baseline": 0.9, "accuracy": 0.6} for r in RUNS])
    drawn = figures.fig10(df, tmp_path / "fig10.pdf")
    cells = drawn[drawn["kind"] == "cell"].set_index(["series", "x"])["y"]
    expected = df[df["kind"] == "role"].groupby(["source", "target"])["drop"].mean()
    assert len(cells.dropna()) == len(expected)
    for (s, t), v in expected.items():
        assert cells[(s, t)] == pytest.approx(v, abs=1e-6)
    matching = drawn[drawn["kind"] == "bar"]
    assert matching["y"].tolist() == pytest.approx([0.3])


def test_layer_relevance_scatters_every_run(tmp_path):
    df = pd.DataFrame([{"variant": "text_only", "run": r, "layer": i, "cosine": RNG.uniform(), "drop": RNG.uniform(),
                        "spearman_cosine_drop": 0.1} for r in RUNS for i in range(4)])
    drawn = figures.fig_layer_relevance(df, tmp_path / "lr.pdf")
    for r in RUNS:
        points = drawn[(drawn["kind"] == "scatter") & (drawn["series"] == r)]
        expected = df.loc[df["run"] == r, ["cosine", "drop"]].to_numpy()
        assert np.allclose(np.sort(points[["x", "y"]].to_numpy(float), 0), np.sort(expected, 0))


def test_the_paper_figures_keep_two_thirds_of_their_area_for_plots_and_their_note_in_a_footnote(tmp_path):
    """fig3 and fig8 at mini's size (two orders, six variants, three seeds), fig4 with a panel per variant and
    label, fig9 with a panel per run: the plots' box keeps >= 2/3 of the figure, legends sit in a band above the
    data (every curve and bar within [0, 1] stays below the legend) and within their panel's width, the note is a
    footnote, not a title."""
    variants = ["text_only", "noise_text", "image_text", "noise_image_text", "curriculum_text", "noise_curriculum_text"]
    runs = ["seed0", "seed1", "seed2"]

    def runs_of(v):  # the image-trained variants' runs are named by seed and encoder, as mini's
        return [f"{r}-render_cnn" for r in runs] if "image" in v else runs

    evals = pd.DataFrame([{"variant": v, "run": r, "order": o, "n_objects": n, "accuracy": RNG.uniform(0.0, 1.0),
                           "in_distribution": n <= 8, "diverged": r.startswith("seed1"),
                           "converged": not r.startswith("seed2"), "convergence": ""}
                          for v in variants for r in runs_of(v) for o in ("fixed", "shuffled") for n in range(2, 33)])
    shares = pd.DataFrame([{"variant": v, "run": r, "position": "answer", "layer": layer, "label": k,
                            "fraction": 1 / 6, "pairs_kept": 900}
                           for v in variants for r in runs for layer in range(7) for k in figures.LABEL_COLORS])
    circuits = pd.DataFrame([{"variant": v, "run": r, "circuit": "Positional" if r != "seed0" else "none",
                              "label_position": "answer", "spike_layer": 3, "weak": False}
                             for v in variants for r in runs])
    note = "mini scale (CPU): 6 layers, d_model 64, 3 seeds; see config/mini.yaml"
    drawn = {"fig3": figures.fig3(evals, tmp_path / "fig3.png", note),
             "fig8": figures.fig8(evals, tmp_path / "fig8.png", note),
             "fig4": figures.fig4(shares, tmp_path / "fig4.png", note, circuits=circuits),
             "fig9": figures.fig9(shares, tmp_path / "fig9.png", note, circuits=circuits)}
    for name, d in drawn.items():
        assert d.attrs["layout"]["axes_area"] >= 2 / 3, name
        assert d.attrs["layout"]["axes_height"] >= 2 / 3, name
        assert d.attrs["layout"]["legend_bottom"] >= 1.0, name  # accuracies and shares end at 1
        assert d.attrs["layout"]["legend_overhang"] <= 0.0, name  # no legend wider than its panel
        assert not d["title"].str.contains("mini scale").any(), name


def test_a_retried_run_is_marked_in_every_figure_that_shows_a_result(tmp_path):
    """seed1 of image_text retried a stage (its evaluation table's `retries`): fig3's legend counts it, fig8's legend
    names it, and every analysis figure marks it by name where it names runs (fig9's titles, fig12's and
    layer_relevance's legends, fig13's rows) and in its footnote where it averages them (fig4, fig10, fig11); runs
    that did not retry are not marked; the evaluation table's `retries` counts the units that retried (its lineage's
    meta.json), ood_accuracy.csv's retried_runs, the closing summary and claims.csv's n_retried count the run,
    circuits.csv carries it (test_smoke_dag)."""
    from vlbind.evaluation.claims import claims_table
    from vlbind.evaluation.outcomes import DivergenceRule, with_verdicts
    from vlbind.evaluation.tables import ood_summary, run_summary

    metas = {"text_s1": {"stage": "text_s1"}, "text_s4": {"stage": "text_s4", "ramp": [{"attempts": [{}, {}]}]},
             "image_text": {"stage": "image_text", "attempts": [{}, {}, {}]}}  # a ramp length and a stage retried
    one = eval_rows().query("variant == 'image_text' and run == 'seed1'").drop(columns=["diverged", "converged",
                                                                                        "convergence"])
    rule = DivergenceRule(collapse_drop=0.5, min_in_distribution=None, stall_margin=None)
    assert (with_verdicts(one, {}, metas, rule, "fixed")["retries"] == 2).all()
    evals = eval_rows().assign(retries=0, seed=lambda d: d["run"].str[-1].astype(int))
    evals.loc[(evals["variant"] == "image_text") & (evals["run"] == "seed1"), "retries"] = 2
    summary = ood_summary(evals)
    assert summary.loc["image_text", "retried_runs"] == 1 and summary.loc["text_only", "retried_runs"] == 0
    assert "image_text" in (line := [x for x in run_summary(summary.reset_index().assign(order="fixed")).splitlines()
                                     if "needed a retry" in x][0]) and "1 of 2 needed a retry" in line
    circuits = pd.DataFrame([{"variant": v, "run": r, "circuit": "Positional"} for v in ("text_only", "image_text")
                             for r in RUNS])
    claims = claims_table(evals, circuits).set_index("claim")
    assert claims.loc["image_beats_text", "n_retried"] == 1 and claims.loc["text_positional", "n_retried"] == 0
    fig3 = figures.fig3(evals, tmp_path / "fig3.pdf")
    assert any("1 retried" in t for legend in fig3.attrs["legends"] for t in legend)
    fig8 = [t for legend in figures.fig8(evals, tmp_path / "fig8.pdf").attrs["legends"] for t in legend]
    assert [t.split(" ")[0] for t in fig8 if "retried" in t] == ["seed1"]
    assert sum(t.startswith("seed") for t in fig8) == 4

    retried = {("image_text", "seed1")}
    runs = [("text_only", r) for r in RUNS] + [("image_text", r) for r in RUNS]
    layers = range(3)
    tables = {
        "interchange": pd.DataFrame([{"variant": v, "run": r, "position": "answer", "layer": i, "label": k,
                                      "fraction": 0.5, "pairs_kept": 10}
                                     for v, r in runs for i in layers for k in ("positional", "no_effect")]),
        "knockout": pd.DataFrame([{"variant": v, "run": r, "kind": kind, "source": a, "target": b,
                                   "drop": 0.2, "baseline": 0.9, "accuracy": 0.7}
                                  for v, r in runs for kind in ("role", "matching")
                                  for a in ("query", "context shape") for b in ("query", "context shape") if a != b]),
        "probes": pd.DataFrame([{"variant": v, "run": r, "role": role, "attribute": a, "layer": i, "accuracy": 0.6,
                                 "chance": 0.1} for v, r in runs for role in ("context shape", "association shape")
                                for a in ("slot", "color", "shape", "item") for i in layers]),
        "layer_relevance": pd.DataFrame([{"variant": v, "run": r, "layer": i, "cosine": 0.5, "drop": 0.1,
                                          "spearman_cosine_drop": 0.2} for v, r in runs for i in layers]),
    }
    circuits = pd.DataFrame([{"variant": v, "run": r, "circuit": "Positional", "label_position": "answer",
                              "spike_layer": 1, "weak": False, "retries": int((v, r) in retried)} for v, r in runs])
    note = figures.retried_note(retried)
    assert note.endswith("image_text/seed1.")
    drawn = {}
    for name, analysis in {"fig4": "interchange", "fig9": "interchange", "fig10": "knockout", "fig11": "probes",
                           "fig12": "probes", "fig13": "knockout", "fig_layer_relevance": "layer_relevance"}.items():
        drawn[name] = figures.FIGURES[name](figures.mark_retried(tables[analysis], retried), tmp_path / f"{name}.pdf",
                                            note=note, circuits=figures.mark_retried(circuits, retried))
        assert drawn[name].attrs["note"] == note, name
    marked = "seed1" + figures.RETRIED
    assert drawn["fig9"]["title"].str.contains(f"image_text / {marked}", regex=False).any()
    assert not drawn["fig9"]["title"].str.contains(f"text_only / {marked}", regex=False).any()
    for name in ("fig12", "fig_layer_relevance"):
        assert any(marked in t for legend in drawn[name].attrs["legends"] for t in legend), name
    assert (drawn["fig13"]["series"] == f"image_text / {marked}").any()
    assert (drawn["fig13"]["series"] == "text_only / seed1").any()
