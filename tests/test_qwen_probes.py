"""Probes on pretrained models (vlbind.qwen.probes): the probed tokens and their labels re-derived from the
prompt text, the dual ridge against the scratch models' primal one, the cross-validated penalty against a
fold-by-fold recomputation, and a tiny Qwen model probed end to end."""

import re

import numpy as np
import pytest

from vlbind.interp.probes import ProbeConfig, fit_and_score
from vlbind.qwen.probes import (
    ROLES,
    QwenProbeConfig,
    choose_ridge,
    make_prompt,
    probe_table,
    ridge_accuracy,
    token_positions,
)
from vlbind.qwen.prompts import Chat
from vlbind.qwen.tiny import tiny, tiny_tokenizer
from vlbind.qwen.words import COLOR_WORDS, SHAPE_WORDS


def test_probed_tokens_are_the_shape_words_and_labels_their_colors_in_the_text():
    tok = tiny_tokenizer()
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = make_prompt(rng, 6)
        context = re.search(r"Context: (.*?)\. Associations", p.text)[1]
        color_of = {shape: color for color, shape in re.findall(r"the (\w+) one is a (\w+)", context)}
        assert len(color_of) == 6  # the color is never the word right before its shape
        assoc = [pair.split()[0] for pair in re.search(r"Associations: (.*?)\. Question", p.text)[1].split(", ")]
        ids, positions = token_positions(tok, p, Chat())
        words = tok.convert_ids_to_tokens(ids[0].tolist())
        for role in ROLES:
            shapes = [words[t] for t in positions[role]]
            assert all(s in SHAPE_WORDS for s in shapes)
            assert [COLOR_WORDS[c] for c in p.colors] == [color_of[s] for s in shapes]
        assert sorted(positions["association shape"]) == [words.index(s, positions["context shape"][-1] + 1)
                                                          for s in assoc]


def planted(n=300, d=40, layers=3, seed=0):
    """Features (L, n, d) whose layer l carries the label along one direction with noise of scale 1 + 2 l."""
    rng = np.random.default_rng(seed)
    y = rng.integers(4, size=n)
    x = rng.normal(size=(layers, n, d))
    for layer in range(layers):
        x[layer, :, :4] += np.eye(4)[y] * 2.0 / (1 + 2 * layer)
    return x, y


def test_the_dual_ridge_equals_the_scratch_models_primal_ridge():
    x, y = planted()
    for ridge in (0.5, 50.0):
        dual = ridge_accuracy(x[:, :200], y[:200], x[:, 200:], y[200:], [ridge])[0][0]
        primal, _ = fit_and_score(x[:, :200], y[:200], x[:, 200:], y[200:], ProbeConfig(ridge=ridge))
        np.testing.assert_allclose(dual, primal)


def test_the_penalty_is_the_best_one_over_folds_split_by_prompt():
    x, y = planted(n=240, d=300)  # more dimensions than rows, as in a 7B model
    groups = np.repeat(np.arange(40), 6)  # 40 prompts of 6 objects
    ridges = (0.01, 10.0, 1e4)
    chosen = choose_ridge(x, y, groups, ridges, folds=4)
    fold = groups % 4
    for layer in range(3):
        scores = [np.mean([fit_and_score(x[layer:layer + 1, fold != f], y[fold != f], x[layer:layer + 1, fold == f],
                                         y[fold == f], ProbeConfig(ridge=r))[0][0] for f in range(4)]) for r in ridges]
        best = max(i for i, s in enumerate(scores) if s == max(scores))  # the larger penalty on a tie
        assert chosen[layer] == ridges[best]


def test_a_tiny_qwen_model_is_probed_at_every_layer_with_chance_and_its_penalty():
    model, tok = tiny("qwen2_5_vl")
    cfg = QwenProbeConfig(train_prompts=24, test_prompts=12, n_objects=4, folds=3, seed=0)
    t = probe_table(model, tok, cfg, Chat())
    assert set(t["role"]) == set(ROLES) and sorted(t["layer"].unique()) == [0, 1]
    assert t["accuracy"].between(0, 1).all() and t["chance"].between(0, 1).all()
    assert t["ridge"].isin(cfg.ridges).all()


def test_bad_probe_config_names_the_key():
    with pytest.raises(ValueError, match="qwen.probes.folds"):
        QwenProbeConfig(train_prompts=4, folds=5)
    with pytest.raises(ValueError, match="qwen.probes.ridges"):
        QwenProbeConfig.from_dict({"ridges": [0]})


def test_the_qwen_probes_share_the_ridge_inputs_without_the_scratch_model_stack():
    """qwen.probes reads interp.ridge, not interp.probes: importing it loads no module of vlbind.model."""
    import subprocess
    import sys

    code = "import sys, vlbind.qwen.probes; print(sorted(m for m in sys.modules if m.startswith('vlbind.model')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
