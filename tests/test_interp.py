"""Mechanistic analyses: counterfactual construction, patching, labelling, knockouts, probes, layer relevance."""

import numpy as np
import pandas as pd
import pytest
import torch
from test_tasks import keys_in_context_order, solve

from vlbind.core.vocab import VOCAB
from vlbind.data.tasks import Role, prompt_text
from vlbind.interp.circuits import circuit_label, effect
from vlbind.interp.interchange import (
    LABELS,
    MECHANISMS,
    POSITIONS,
    item_argmax,
    label_predictions,
    make_pairs,
    patched_answer_logits,
    query_answer_residuals,
    sweep,
)
from vlbind.interp.knockout import MATCHING, accuracy_with_knockout, edge_mask, knockout_table
from vlbind.interp.layer_relevance import block_cosines, skip_accuracy, spearman
from vlbind.interp.mechanisms import first_spike
from vlbind.interp.probes import ProbeConfig, fit_and_score, probe_table
from vlbind.interp.prompts import analysis_prompts
from vlbind.model.hooks import patch_hook
from vlbind.model.inference import model_inputs
from vlbind.model.transformer import ModelConfig, Transformer


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(n_layers=3, d_model=32, d_ff=64, n_heads=2)).eval()


# --- counterfactual pairs -----------------------------------------------------------------------------

def test_counterfactual_is_a_valid_prompt_and_the_five_predictions_are_distinct():
    pairs = make_pairs(1000, np.random.default_rng(0))
    assert (np.sort(pairs.predictions, axis=1)[:, 1:] != np.sort(pairs.predictions, axis=1)[:, :-1]).all()
    o, cf = pairs.original, pairs.counterfactual
    assert (o.n_objects >= 5).all() and (o.answer_pos == cf.answer_pos).all()
    for i in range(0, 1000, 7):
        cf_text, o_text = prompt_text(cf, i), prompt_text(o, i)
        assert solve(cf_text) == VOCAB.tokens[cf.target[i]] and solve(o_text) == VOCAB.tokens[o.target[i]]
        toks = cf_text.split()
        n = o.n_objects[i]
        assert len(set(toks[: 2 * n])) == 2 * n  # distinct colors and shapes in the counterfactual context
        q, c, w, x, s = pairs.slots[i]
        assert len({q, c, w, x, s}) == 5
        # the construction, read back from the text: queried color = original color of w, at slot c
        o_toks = o_text.split()
        assert toks[-2] == o_toks[2 * w] and toks[2 * c] == o_toks[2 * w]
        assert toks[2 * c + 1] == o_toks[2 * x + 1]  # shape at slot c = original shape of x
        assert VOCAB.tokens[cf.target[i]] == VOCAB.tokens[pairs.predictions[i, MECHANISMS.index("reflexive")]]
        assert solve(o_text) == VOCAB.tokens[pairs.predictions[i, MECHANISMS.index("no_effect")]]


def test_labeller_maps_each_predicted_item_to_its_mechanism():
    pairs = make_pairs(200, np.random.default_rng(1))
    for j, mechanism in enumerate(MECHANISMS):
        labels = label_predictions(pairs.predictions[:, j], pairs.predictions)
        assert (np.array(LABELS)[labels] == mechanism).all()
    items = range(VOCAB.item_offset, VOCAB.item_offset + VOCAB.n_items)
    other = np.array([next(t for t in items if t not in p) for p in pairs.predictions])
    assert (np.array(LABELS)[label_predictions(other, pairs.predictions)] == "mixed").all()


# --- patching -------------------------------------------------------------------------------------------

def test_no_patch_run_equals_the_plain_forward_bit_for_bit(model):
    pairs = make_pairs(16, np.random.default_rng(2))
    tokens, positions, _ = model_inputs(pairs.original, "cpu")
    with torch.no_grad():
        plain = model(tokens, positions)
        nothing = torch.zeros(0, dtype=torch.long)
        hooks = [(f"blocks.{i}.hook_resid_pre", patch_hook(nothing, nothing, torch.zeros(0, 32))) for i in range(3)]
        with model.hooks(hooks):
            hooked = model(tokens, positions)
    assert torch.equal(plain, hooked)
    # patching each layer's own residuals back in leaves every answer where it was: all no_effect
    layers = [0, 1, 2, 3]
    own = query_answer_residuals(model, pairs.original, layers)
    for position in POSITIONS:
        patched = item_argmax(patched_answer_logits(model, pairs.original, layers, own, positions=(position,))[0],
                              pairs.original)
        assert (patched == item_argmax(model.logits(own[-1][:, 1]), pairs.original)[None]).all()


def test_patching_the_whole_stream_entering_block0_reproduces_the_counterfactual(model):
    pairs = make_pairs(16, np.random.default_rng(3))
    o, cf = pairs.original, pairs.counterfactual
    (tok_o, pos_o, _), (tok_c, pos_c, _) = model_inputs(o, "cpu"), model_inputs(cf, "cpu")
    with torch.no_grad():
        cf_embed = model.embed(tok_c)
        B, T = tok_o.shape
        rows, cols = torch.arange(B).repeat_interleave(T), torch.arange(T).repeat(B)
        with model.hooks([("blocks.0.hook_resid_pre", patch_hook(rows, cols, cf_embed[rows, cols]))]):
            patched = model(tok_o, pos_o)
        torch.testing.assert_close(patched, model(tok_c, pos_c), rtol=0, atol=0)


def test_patching_the_answer_stream_after_the_last_block_reproduces_the_counterfactual_answer(model):
    pairs = make_pairs(16, np.random.default_rng(4))
    o, cf = pairs.original, pairs.counterfactual
    last = [model.cfg.n_layers]
    patched = patched_answer_logits(model, o, last, query_answer_residuals(model, cf, last))[0, 0]
    tok_c, pos_c, _ = model_inputs(cf, "cpu")
    with torch.no_grad():
        expected = model(tok_c, pos_c)[torch.arange(len(cf)), torch.as_tensor(cf.answer_pos)]
    torch.testing.assert_close(patched, expected, rtol=1e-5, atol=1e-5)


def naive_patched_answer_logits(model, batch, layer, value, position):
    """One full forward pass per layer with a hook overwriting the residual at the query token (value[:, 0]),
    at [ANSWER] (value[:, 1]) or both: the plain method."""
    n = model.cfg.n_layers
    name = f"blocks.{layer}.hook_resid_pre" if layer < n else f"blocks.{n - 1}.hook_resid_post"
    tokens, positions, _ = model_inputs(batch, "cpu")
    rows, ans = torch.arange(len(batch)), torch.as_tensor(batch.answer_pos)
    which = {"answer": [1], "query": [0], "both": [0, 1]}[position]
    at = torch.cat([ans - 1 + k for k in which])
    hook = patch_hook(rows.repeat(len(which)), at, torch.cat([value[:, k] for k in which]))
    with torch.no_grad(), model.hooks([(name, hook)]):
        return model(tokens, positions)[rows, ans]


def test_cached_all_layer_patching_equals_full_forward_patching_layer_by_layer(model):
    pairs = make_pairs(24, np.random.default_rng(5))
    layers = list(range(model.cfg.n_layers + 1))
    values = query_answer_residuals(model, pairs.counterfactual, layers)
    positions = ("answer", "query", "both")
    fast = patched_answer_logits(model, pairs.original, layers, values, positions=positions)  # one pass for all
    for j, position in enumerate(positions):
        for i, layer in enumerate(layers):
            naive = naive_patched_answer_logits(model, pairs.original, layer, values[i], position)
            torch.testing.assert_close(fast[j, i], naive, rtol=1e-5, atol=1e-5)


def test_kv_cache_extension_equals_the_full_forward(model):
    """Transformer.extend over cached keys/values gives the full forward's last positions."""
    from vlbind.model.hooks import cache_hook
    b = analysis_prompts(8, seed=6, order="shuffled")[0]
    tokens, positions, _ = model_inputs(b, "cpu")
    store = {}
    names = [f"blocks.{i}.attn.hook_{kv}" for i in range(3) for kv in "kv"]
    with torch.no_grad(), model.hooks([(n, cache_hook(store)) for n in names]):
        full = model.residual(tokens, positions)
    T, cut = tokens.shape[1], tokens.shape[1] - 3
    valid = torch.ones(len(b), cut, dtype=torch.bool)
    with torch.no_grad():
        tail = model.extend(model.embed(tokens[:, cut:]), positions[:, cut:],
                            [store[f"blocks.{i}.attn.hook_k"][:, :, :cut] for i in range(3)],
                            [store[f"blocks.{i}.attn.hook_v"][:, :, :cut] for i in range(3)], valid)
    torch.testing.assert_close(tail, full[:, cut:T], rtol=1e-5, atol=1e-5)


def test_sweep_counts_pairs_and_shares_sum_to_one_per_layer(model):
    table, info = sweep(model, 1024, seed=0, order="shuffled")  # a random model solves few pairs: 1024 keep some
    assert info["generated"] == 1024 and info["kept"] + info["dropped"] == 1024 and info["kept"] > 0
    assert set(table["label"]) == set(LABELS) and table["layer"].nunique() == model.cfg.n_layers + 1
    assert list(table["position"].unique()) == list(POSITIONS)
    np.testing.assert_allclose(table.groupby(["position", "layer"])["fraction"].sum(), 1.0)
    assert (table.groupby(["position", "layer"])["count"].sum() == info["kept"]).all()


def test_sweep_runs_the_same_pairs_for_any_batch_size(model):
    """The pairs are drawn at once: batches of 128 (the default), 100 and all 1024 give the same table."""
    table, info = sweep(model, 1024, seed=0, order="shuffled")
    for size in (100, 1024):
        other, other_info = sweep(model, 1024, seed=0, order="shuffled", batch_size=size)
        assert other_info == info
        pd.testing.assert_frame_equal(other, table)


def test_first_spike_and_circuit_labels():
    def table(shares_by_layer):
        return pd.DataFrame([{"layer": layer, "label": k, "fraction": shares.get(k, 0.0),
                              "count": int(100 * shares.get(k, 0.0))}
                             for layer, shares in enumerate(shares_by_layer) for k in LABELS])
    probes = pd.DataFrame({"role": ["context shape"] * 2, "attribute": ["color"] * 2, "layer": [0, 1],
                           "accuracy": [0.1, 0.6], "chance": [0.05, 0.05]})
    early = {"no_effect": 1.0}
    cases = {"positional": "Positional", "color_key": "Symbolic-A", "shape_key": "Symbolic-B"}
    for mechanism, circuit in cases.items():
        t = table([early, {"no_effect": 0.3, mechanism: 0.6, "reflexive": 0.1}, {"reflexive": 1.0}])
        assert first_spike(effect(t), 0.5) == 1
        label = circuit_label(t, probes)
        assert label["circuit"] == circuit and label["probes_agree"] == (circuit != "Positional")
    assert circuit_label(table([early, early]), probes)["circuit"] == "none"
    readout = {"reflexive": 1.0}
    unresolved = circuit_label(table([early, {"reflexive": 0.9, "positional": 0.1}, readout]), probes)
    assert (unresolved["circuit"], unresolved["winner"], unresolved["runner_up"]) == ("unresolved", "reflexive",
                                                                                      "positional")
    empty = table([{}])
    assert first_spike(effect(empty), 0.5) is None  # no pair kept: no spike, not a spike at layer 0


def test_the_second_reading_is_the_layer_before_the_read_out():
    """A first spike that catches the queried color arriving at [ANSWER] (color_key 0.5 at layer 1) while the layer
    before the read-out is positional on 0.95 of pairs: `circuit` reads Symbolic-A (appendix F's rule), `last_circuit`
    Positional, each with its own shares; a layer before the read-out that changes too few answers reads "none"."""
    def table(shares_by_layer):
        return pd.DataFrame([{"layer": layer, "label": k, "fraction": shares.get(k, 0.0),
                              "count": int(100 * shares.get(k, 0.0))}
                             for layer, shares in enumerate(shares_by_layer) for k in LABELS])
    probes = pd.DataFrame({"role": ["context shape"], "attribute": ["color"], "layer": [1], "accuracy": [0.1],
                           "chance": [0.05]})
    none, readout = {"no_effect": 1.0}, {"reflexive": 1.0}
    spike = {"color_key": 0.5, "positional": 0.3, "no_effect": 0.2}
    label = circuit_label(table([none, spike, {"positional": 0.7, "no_effect": 0.3},
                                 {"positional": 0.95, "mixed": 0.05}, readout]), probes)
    assert (label["circuit"], label["spike_layer"], label["share_color_key"]) == ("Symbolic-A", 1, 0.5)
    assert (label["last_circuit"], label["last_layer"], label["last_winner_share"]) == ("Positional", 3, 0.95)
    assert label["last_share_color_key"] == 0.0 and label["last_share_mixed"] == 0.05
    quiet = circuit_label(table([none, spike, {"positional": 0.3, "no_effect": 0.7}, readout]), probes)
    assert (quiet["circuit"], quiet["last_circuit"], quiet["last_winner"]) == ("Symbolic-A", "none", None)
    reflexive = circuit_label(table([none, spike, {"reflexive": 0.9, "positional": 0.1}, readout]), probes)
    assert reflexive["last_circuit"] == "unresolved"


def test_a_run_that_computes_its_answer_at_the_query_token_is_labelled_from_there():
    """[ANSWER] shows no effect before the read-out (it copies the answer in its last block): the rule reads the
    query token's patches, leaving out layer 0 there (it swaps the query token itself), then both."""
    def rows(position, shares_by_layer):
        return [{"position": position, "layer": layer, "label": k, "fraction": shares.get(k, 0.0),
                 "count": int(100 * shares.get(k, 0.0))} for layer, shares in enumerate(shares_by_layer)
                for k in LABELS]
    probes = pd.DataFrame({"role": ["context shape"], "attribute": ["color"], "layer": [1], "accuracy": [0.1],
                           "chance": [0.05]})
    none, readout, swap = {"no_effect": 1.0}, {"reflexive": 1.0}, {"color_key": 1.0}
    answer = rows("answer", [none, none, none, readout])
    query = rows("query", [swap, {"positional": 0.8, "no_effect": 0.2}, {"positional": 0.9}, none])
    label = circuit_label(pd.DataFrame(answer + query), probes)
    assert (label["circuit"], label["label_position"], label["spike_layer"]) == ("Positional", "query", 1)
    assert (label["last_circuit"], label["last_layer"]) == ("Positional", 2)  # read at the same position
    assert circuit_label(pd.DataFrame(answer), probes)["circuit"] == "none"  # [ANSWER] alone: nothing to read
    both = rows("both", [swap, none, {"shape_key": 0.7, "reflexive": 0.3}, readout])
    label = circuit_label(pd.DataFrame(answer + rows("query", [swap, none, none, none]) + both), probes)
    assert (label["circuit"], label["label_position"], label["spike_layer"]) == ("Symbolic-B", "both", 2)
    at_answer = rows("answer", [none, {"positional": 0.6, "no_effect": 0.4}, readout, readout])
    label = circuit_label(pd.DataFrame(at_answer + query), probes)  # [ANSWER] first: the paper's reading
    assert (label["label_position"], label["spike_layer"]) == ("answer", 1)


def with_a_late_copy(model, scale=1e4, sharpness=1e3):
    """`model` plus one hand-set last block in which [ANSWER] copies the query token's stream: its attention reads
    only the position just before it (RoPE scores from constant queries and keys), its values are the normalised
    stream, scaled to drown [ANSWER]'s own; its MLP is off. So the model computes its answer at the query token
    and [ANSWER] holds nothing of it until the last block, as the seed-0 image runs of docs/results/mini do."""
    from dataclasses import replace

    from vlbind.model.transformer import Block, Transformer

    n, d, heads = model.cfg.n_layers, model.cfg.d_model, model.cfg.n_heads
    copy = Transformer(replace(model.cfg, n_layers=n + 1)).eval()
    copy.load_state_dict(model.state_dict(), strict=False)  # every weight but the new block's
    block: Block = copy.blocks[n]
    gain = 1e-3
    with torch.no_grad():
        block.ln1.weight.fill_(gain)  # ln1(x) = gain * normalised(x) + 1: a constant plus a small copy of x
        block.ln1.bias.fill_(1.0)
        dh, ones = d // heads, torch.ones(d)
        theta = torch.view_as_real(copy.rope_cis[1])  # (Dh/2, 2): the rotation one position back
        q = sharpness * torch.stack([theta[:, 0], -theta[:, 1]], -1).flatten()  # q . R(m - n) k peaks at m - n = 1
        k = torch.tensor([1.0, 0.0]).repeat(dh // 2)
        w_q, w_k = q.repeat(heads)[:, None] * ones / d, k.repeat(heads)[:, None] * ones / d  # constant on ln1(x)
        block.attn.qkv.weight.copy_(torch.cat([w_q, w_k, torch.eye(d)]))
        block.attn.out.weight.copy_(scale / gain * (torch.eye(d) - torch.outer(ones, ones) / d))  # drop the constant
        block.mlp.down.weight.zero_()
    return copy


NO_PROBES = pd.DataFrame(columns=["role", "attribute", "layer", "accuracy", "chance"])


def test_a_model_that_answers_at_the_query_token_reads_none_at_answer_and_its_effect_at_the_query(model):
    late = with_a_late_copy(model)
    b = analysis_prompts(16, seed=3, order="shuffled")[0]
    tokens, positions, _ = model_inputs(b, "cpu")
    rows, ans = torch.arange(len(b)), torch.as_tensor(b.answer_pos)
    with torch.no_grad():
        torch.testing.assert_close(late(tokens, positions)[rows, ans], model(tokens, positions)[rows, ans - 1],
                                   rtol=1e-3, atol=1e-3)  # its answer is the query token's
    table, info = sweep(late, 1024, seed=0, order="shuffled")
    assert info["kept"] >= 10
    share = table.pivot_table(index=["position", "layer"], columns="label", values="fraction")
    n = late.cfg.n_layers  # block n - 1 copies; layer n is the read-out (the stream after the last block)
    assert (share.loc["answer"].loc[: n - 1, "no_effect"] == 1).all()  # [ANSWER] alone: nothing before the copy
    assert share.loc[("query", n - 1), "reflexive"] == 1  # entering the copy: the query token holds the answer
    assert share.loc[("both", n - 1), "reflexive"] == 1
    assert circuit_label(table[table["position"] == "answer"], NO_PROBES)["circuit"] == "none"
    assert circuit_label(table, NO_PROBES)["label_position"] == "query"  # the rule reads where the answer is made


def test_a_run_that_answers_too_few_pairs_shows_no_mechanism():
    """A model near chance keeps a handful of interchange pairs; a clean spike on 4 pairs is not a mechanism."""
    from vlbind.interp.circuits import CircuitRule

    spike = {"positional": 0.9, "no_effect": 0.1}
    table = pd.DataFrame([{"position": "answer", "layer": layer, "label": k, "fraction": shares.get(k, 0.0),
                           "count": round(kept * shares.get(k, 0.0)), "pairs_kept": kept}
                          for kept in [4] for layer, shares in enumerate([{"no_effect": 1.0}, spike, spike])
                          for k in LABELS])
    label = circuit_label(table, NO_PROBES, CircuitRule(min_pairs=100))
    assert (label["circuit"], label["pairs_kept"], label["spike_layer"]) == ("none", 4, None)
    assert circuit_label(table, NO_PROBES, CircuitRule(min_pairs=4))["circuit"] == "Positional"


def test_the_readout_layer_never_decides_a_label():
    """Patching the residual after the last block copies the counterfactual's answer: reflexive 1.00 there is
    no mechanism, so a run with no earlier effect is "none", whatever the read-out shows."""
    rows = [{"layer": layer, "label": k, "fraction": float(k == top), "count": 100 * int(k == top)}
            for layer, top in enumerate(["no_effect", "no_effect", "reflexive"]) for k in LABELS]
    label = circuit_label(pd.DataFrame(rows), pd.DataFrame(columns=["role", "attribute", "accuracy", "chance"]))
    assert (label["circuit"], label["spike_layer"], label["readout_layer"]) == ("none", None, 2)


@pytest.mark.parametrize("shares, weak", [
    ({"positional": 0.25, "color_key": 0.07, "no_effect": 0.47, "mixed": 0.21}, True),   # < half follow it
    ({"color_key": 0.55, "positional": 0.40, "no_effect": 0.05}, True),                   # leads by 0.15
    ({"color_key": 0.53, "mixed": 0.07, "no_effect": 0.24, "positional": 0.16}, False),
])
def test_every_label_carries_its_margin_and_a_weak_flag(shares, weak):
    layers = [{"no_effect": 1.0}, shares, {"reflexive": 1.0}]
    rows = [{"layer": i, "label": k, "fraction": s.get(k, 0.0), "count": int(100 * s.get(k, 0.0))}
            for i, s in enumerate(layers) for k in LABELS]
    label = circuit_label(pd.DataFrame(rows), pd.DataFrame(columns=["role", "attribute", "accuracy", "chance"]))
    ranked = sorted(((v, k) for k, v in shares.items() if k != "no_effect"), reverse=True)
    assert (label["winner"], label["winner_share"]) == (ranked[0][1], ranked[0][0])
    assert (label["runner_up"], label["runner_up_share"]) == (ranked[1][1], ranked[1][0])
    assert label["share_no_effect"] == shares["no_effect"] and label["weak"] is weak


# --- knockouts ------------------------------------------------------------------------------------------

def test_knocking_out_no_edge_leaves_accuracy_unchanged(model):
    batches = analysis_prompts(64, seed=0, order="shuffled")
    none = [np.zeros((len(b), b.tokens.shape[1], b.tokens.shape[1]), bool) for b in batches]
    assert accuracy_with_knockout(model, batches, none) == accuracy_with_knockout(model, batches, None)


def test_blocking_every_edge_out_of_answer_makes_the_answer_blind(model):
    """[ANSWER] then sees only itself: the same logits for every prompt, so accuracy <= chance."""
    batches = analysis_prompts(64, seed=1, order="shuffled")
    masks = []
    for b in batches:
        T = b.tokens.shape[1]
        is_answer = b.roles == Role.ANSWER
        masks.append(is_answer[:, :, None] & np.tril(np.ones((T, T), bool), k=-1)[None])
    acc = accuracy_with_knockout(model, batches, masks)
    from vlbind.model.hooks import knockout_hook
    b, m = batches[0], torch.as_tensor(masks[0])
    tokens, positions, _ = model_inputs(b, "cpu")
    with torch.no_grad(), model.hooks([(f"blocks.{i}.attn.hook_attn_scores", knockout_hook(m)) for i in range(3)]):
        resid = model.residual(tokens, positions)
    logits = model.logits(resid[torch.arange(len(b)), torch.as_tensor(b.answer_pos)])
    torch.testing.assert_close(logits, logits[:1].expand_as(logits), rtol=1e-4, atol=1e-4)
    targets = np.concatenate([b.target for b in batches])
    assert acc <= np.bincount(targets).max() / len(targets)


def test_matching_edges_connect_the_same_object():
    (b,) = analysis_prompts(16, seed=2, order="shuffled")
    for source, target in MATCHING:
        mask = edge_mask(b, source, target, matching=True)
        r, i, j = np.nonzero(mask)
        assert len(r) > 0, (source, target)
        assert (j < i).all()
        slots = b.slots.astype(int).copy()
        slots[np.arange(len(b)), b.answer_pos] = b.query_slot
        assert (slots[r, i] == slots[r, j]).all()
    joint = edge_mask(b, "query+answer", "association item", matching=True)
    singles = [edge_mask(b, s, "association item", matching=True) for s in ("query", "answer")]
    assert np.array_equal(joint, singles[0] | singles[1]) and not (singles[0] & singles[1]).any()


def test_knockout_table_reports_every_edge(model):
    t = knockout_table(model, 32, seed=0, order="shuffled")
    assert len(t[t["kind"] == "matching"]) == len(MATCHING) and (t["baseline"] == t["baseline"].iloc[0]).all()
    impossible = t[(t["source"] == "context color") & (t["target"] == "answer")]
    assert impossible["accuracy"].isna().all()  # [ANSWER] never precedes a context color


# --- probes ---------------------------------------------------------------------------------------------

def test_probe_recovers_a_planted_signal_and_stays_at_chance_on_shuffled_labels():
    rng = np.random.default_rng(0)
    n, d, k = 1200, 16, 6
    y = rng.integers(0, k, size=n)
    directions = rng.standard_normal((k, d)) * 3
    x = rng.standard_normal((2, n, d))
    x[0] += directions[y]  # layer 0 carries the label linearly, layer 1 does not
    cfg = ProbeConfig()
    acc, chance = fit_and_score(x[:, :800], y[:800], x[:, 800:], y[800:], cfg)
    assert acc[0] > 0.95 and abs(acc[1] - 1 / k) < 0.1 and chance < 0.3
    shuffled = rng.permutation(y)
    acc, _ = fit_and_score(x[:, :800], shuffled[:800], x[:, 800:], shuffled[800:], cfg)
    assert (abs(acc - 1 / k) < 0.1).all()


def test_probe_table_reads_token_identity_at_its_own_position(model):
    t = probe_table(model, ProbeConfig(train_prompts=256, test_prompts=128), order="shuffled")
    own = t[(t["role"] == "context color") & (t["attribute"] == "color") & (t["layer"] == 0)]["accuracy"].item()
    assert own > 0.5  # layer 0 is the token embedding: the color is right there
    assert set(t["layer"]) == set(range(model.cfg.n_layers + 1))


# --- layer relevance ------------------------------------------------------------------------------------

def test_skipping_no_block_changes_nothing_and_skipping_one_equals_leaving_it_out(model):
    batches = analysis_prompts(32, seed=3, order="shuffled")
    with torch.no_grad():  # accuracy recomputed from full forward passes
        hits = [(model(*model_inputs(b, "cpu")[:2])[np.arange(len(b)), b.answer_pos].argmax(-1).numpy() == b.target)
                for b in batches]
    assert skip_accuracy(model, batches, None) == np.concatenate(hits).mean()
    b = batches[0]
    tokens, positions, _ = model_inputs(b, "cpu")
    from vlbind.model.hooks import skip_block_hooks
    with torch.no_grad():
        with model.hooks(skip_block_hooks(1)):
            skipped = model(tokens, positions)
        x = model.embed(tokens)
        cis = model.rope_cis[positions][:, :, None, None]
        for i, block in enumerate(model.blocks):
            if i != 1:
                x = block(x, cis)
        torch.testing.assert_close(skipped, model.logits(x), rtol=0, atol=0)


def test_block_cosines_match_a_direct_computation(model):
    batches = analysis_prompts(16, seed=4, order="shuffled")
    cos = block_cosines(model, batches)
    b = batches[0]
    tokens, positions, _ = model_inputs(b, "cpu")
    with torch.no_grad():
        x = model.embed(tokens)
        cis = model.rope_cis[positions][:, :, None, None]
        y = model.blocks[0](x, cis)
    real = torch.as_tensor(b.roles != Role.PAD)
    expected = torch.nn.functional.cosine_similarity(x, y, dim=-1)[real].mean()
    assert abs(cos[0] - float(expected)) < 1e-5


def test_spearman():
    a = pd.Series([1.0, 2.0, 3.0, 4.0])
    assert spearman(a, a ** 3) == pytest.approx(1.0) and spearman(a, -a) == pytest.approx(-1.0)
    assert np.isnan(spearman(a, pd.Series([1.0] * 4)))


# --- prompt order -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["fixed", "shuffled"])
def test_analysis_prompts_and_interchange_pairs_follow_the_order(order):
    from vlbind.data.spec import in_order
    from vlbind.interp.interchange import INTERCHANGE_SPEC

    texts = [prompt_text(b, i) for b in analysis_prompts(64, seed=8, order=order) for i in range(len(b))]
    pairs = make_pairs(64, np.random.default_rng(9), in_order(INTERCHANGE_SPEC, order))
    for batch in (pairs.original, pairs.counterfactual):
        texts += [prompt_text(batch, i) for i in range(len(batch))]
    for i in range(64):  # the mechanisms' predictions hold in either order: the counterfactual's answer is reflexive
        assert solve(prompt_text(pairs.counterfactual, i)) == VOCAB.tokens[pairs.predictions[i, 3]]
    ordered = [keys_in_context_order(t) for t in texts]
    assert all(ordered) if order == "fixed" else sum(ordered) < len(ordered) / 4


@pytest.mark.parametrize("analysis", ["interchange", "knockout", "probes", "layer_relevance"])
def test_every_analysis_runs_on_the_order_it_is_given(model, analysis, monkeypatch):
    import vlbind.interp.interchange as interchange_module
    import vlbind.interp.prompts as prompts_module
    from vlbind.interp import analyze
    from vlbind.interp import settings as interp_settings

    seen = []
    for module in (prompts_module, interchange_module):
        real = module.generate
        monkeypatch.setattr(module, "generate", lambda spec, *a, _real=real, **k: seen.append(spec.shuffle)
                            or _real(spec, *a, **k))
    settings = {"interchange": {"pairs": 8, "seed": 1}, "knockout": {"prompts": 8, "seed": 1},
                "probes": {"train_prompts": 16, "test_prompts": 8, "ridge": 1.0, "seed": 1},
                "layer_relevance": {"prompts": 8, "seed": 1}}[analysis]
    analyze(analysis, model, interp_settings(analysis, settings), "cpu", order="fixed", precision="fp32")
    assert seen and not any(seen)
    seen.clear()
    analyze(analysis, model, interp_settings(analysis, settings), "cpu", order="shuffled", precision="fp32")
    assert seen and all(seen)


@pytest.mark.parametrize("analysis", ["interchange", "knockout", "probes", "layer_relevance"])
def test_every_analysis_runs_in_the_precision_it_is_given(model, analysis):
    from vlbind.interp import analyze
    from vlbind.interp import settings as interp_settings

    settings = {"interchange": {"pairs": 8, "seed": 1}, "knockout": {"prompts": 8, "seed": 1},
                "probes": {"train_prompts": 16, "test_prompts": 8, "ridge": 1.0, "seed": 1},
                "layer_relevance": {"prompts": 8, "seed": 1}}[analysis]
    tables = {}
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        seen = set()
        with model.hooks([(f"blocks.{i}.hook_mlp_out", lambda x, name, seen=seen: seen.add(x.dtype))
                          for i in range(model.cfg.n_layers)]):
            tables[precision], _ = analyze(analysis, model, interp_settings(analysis, settings), "cpu", order="fixed",
                                           precision=precision)
        assert seen == {dtype}
    fp32, bf16 = tables["fp32"], tables["bf16"]
    assert list(fp32.columns) == list(bf16.columns) and len(fp32) == len(bf16)


def test_the_registry_names_each_analysis_module_its_settings_and_figures_that_exist():
    import importlib
    import pkgutil

    import vlbind.interp
    from vlbind import figures
    from vlbind.interp import ANALYSES, analyze, settings

    # the registry, read from the sources without importing them, against the modules imported
    modules = {m.name: importlib.import_module(f"vlbind.interp.{m.name}")
               for m in pkgutil.iter_modules(vlbind.interp.__path__)}
    assert ANALYSES == {name: m.FIGURES for name, m in modules.items() if hasattr(m, "FIGURES")}
    assert list(ANALYSES) == ["interchange", "knockout", "probes", "layer_relevance"]  # the paper's figure order
    for analysis, figs in ANALYSES.items():
        module = modules[analysis]
        assert callable(module.run) and isinstance(settings(analysis, {}), module.SETTINGS)
        assert figs and all(f in figures.FIGURES for f in figs)
    drawn = {f for figs in ANALYSES.values() for f in figs}
    assert set(figures.FIGURES) - drawn == {"fig3", "fig8"}  # drawn from the evaluation tables
    with pytest.raises(ValueError, match="valid"):
        analyze("patching", None, {}, "cpu", "fixed", "fp32")
    with pytest.raises(ValueError, match="pairz"):
        settings("interchange", {"pairz": 8})
