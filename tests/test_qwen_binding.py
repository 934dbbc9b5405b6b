"""Interchange interventions on pretrained models (vlbind.qwen.binding): the boxes prompt equals Gur-Arieh et al.'s
template, pairs re-derived from their text, the batched (cached-prefix) layer sweep against one full forward
per layer, scripted positional / symbolic models, the peak and the first spike on scripted tables, and the fitted
minimal model recovering the signals that generated its data."""

import re

import numpy as np
import pandas as pd
import pytest
import torch

from vlbind.qwen.binding import (
    BindingConfig,
    boxes_text,
    chat_ids,
    fit_mechanisms,
    full_forward_patched,
    interchange,
    last_stream,
    make_pairs,
    patched_last_logits,
    summarize,
    table1,
)
from vlbind.qwen.prompts import Chat
from vlbind.qwen.tiny import tiny, tiny_tokenizer

USER_ONLY = Chat(system_prompt=None, thinking=False)  # their format_prompt: the user's turn only


def boxes(text):
    """[(object, letter)] in context order and the queried object, read from a prompt's text."""
    return re.findall(r"[Tt]he (\w+) is in Box (\w)", text), re.search(r"Which box is the (\w+) in\?", text)[1]


def test_the_boxes_prompt_is_the_string_their_template_gives():
    # Expected strings: mixing-mechs grammar/schemas.py SCHEMA_BOXES (definition "the {Object} is in Box {Box}",
    # query "Respond in one word, only the answer and nothing else: Which box is the {Object} in? Box"), joined
    # by grammar/task_to_causal_model.py (_format_list, capitalised first clause, "." and raw_input's
    # f"{context} {question} Answer:"), for the objects and letters drawn with seed 7.
    pair = make_pairs(5, 1, seed=7)[0]
    assert pair.original == (
        "The book is in Box B, the cup is in Box M, the spoon is in Box T, the sock is in Box K, and the glove is in "
        "Box N. Respond in one word, only the answer and nothing else: Which box is the glove in? Box Answer:")
    assert boxes_text(["cup", "key"], ["A", "B"], "key") == (
        "The cup is in Box A and the key is in Box B. Respond in one word, only the answer and nothing else: "
        "Which box is the key in? Box Answer:")
    # their format_prompt: the user's turn through the chat template, with the generation prompt
    rendered = USER_ONLY.render(tiny_tokenizer(), pair.original)
    assert rendered == f"<|im_start|>user\n{pair.original}<|im_end|>\n<|im_start|>assistant\n"


def test_every_pair_is_their_counterfactual_rederived_from_its_texts():
    same = 0
    for pair in make_pairs(6, 200, seed=1):
        orig, q = boxes(pair.original)
        cf, cf_q = boxes(pair.counterfactual)
        letter, cf_objects = dict(orig), [o for o, _ in cf]
        e = pair.entries
        assert [o for o, _ in orig].index(q) == e["q"] and cf_objects.index(cf_q) == e["c"] != e["q"]
        assert e["s"] not in (e["q"], e["c"]) and e["w"] not in (e["q"], e["c"])
        assert pair.predictions["no_effect"] == letter[q]
        assert pair.predictions["positional"] == orig[e["c"]][1]  # the original's letter at entry c
        assert pair.predictions["symbolic"] == letter[cf_q]  # the original's letter of the object asked for
        assert pair.predictions["reflexive"] == cf[e["c"]][1] == orig[e["s"]][1]  # the counterfactual's answer
        # the counterfactual holds the same (object, letter) bindings but at c, s and w
        moved = {e["c"], e["s"], e["w"]}
        assert all(cf[i] == orig[i] for i in range(6) if i not in moved)
        same += e["s"] == e["w"]
    assert 0 < same < 200  # s and w are drawn independently (their sampler), so they sometimes coincide


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_the_cached_batched_sweep_equals_one_full_forward_per_layer(model_type):
    model, tok = tiny(model_type)
    pair = make_pairs(6, 1, seed=0)[0]
    ids = chat_ids(tok, pair.original, Chat())
    cf = last_stream(model, chat_ids(tok, pair.counterfactual, Chat()))
    got = torch.cat([patched_last_logits(model, ids, [None, 1], cf), patched_last_logits(model, ids, [0], cf)])
    with torch.no_grad():
        plain = model(input_ids=ids).logits[0, -1]
    want = torch.stack([plain, full_forward_patched(model, ids, 1, cf[1]), full_forward_patched(model, ids, 0, cf[0])])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(want[1], want[0])  # the patch at layer 1 does change the answer's logits
    own = last_stream(model, ids)  # patching a run with its own stream changes nothing
    torch.testing.assert_close(patched_last_logits(model, ids, [0, 1], own), plain.expand(2, -1), rtol=1e-4,
                               atol=1e-4)


class PrefixCache:
    """What the scripted model keeps of a prefix run: its ids (a stand-in for a key/value cache)."""

    def __init__(self, ids):
        self.ids = ids

    def batch_repeat_interleave(self, n):
        self.ids = self.ids.repeat_interleave(n, 0)


class Scripted(torch.nn.Module):
    """A 4-layer stand-in: layer 1 writes at the last token which entry is asked for (its index, or its object's
    token), layer 2 turns that into the entry's letter; the logits are the last token's one-hot letter."""

    def __init__(self, tok, mechanism):
        super().__init__()
        self.tok, self.mechanism, self.V = tok, mechanism, len(tok)
        self.layers = torch.nn.ModuleList(Layer(self, i) for i in range(4))

    def get_decoder(self):
        return self

    def entries(self, ids):
        words = self.tok.convert_ids_to_tokens(ids.tolist())
        pairs = [(words[i + 1], words[i + 5]) for i in range(len(words) - 5)
                 if words[i] in ("the", "The") and words[i + 2:i + 5] == ["is", "in", "Box"]]
        asked = words[len(words) - 1 - words[::-1].index("Which") + 4]
        return pairs, asked

    def forward(self, input_ids, cache=None, use_cache=False, output_hidden_states=False):
        ids = input_ids if cache is None else torch.cat([cache.ids, input_ids], 1)
        x = torch.cat([torch.nn.functional.one_hot(ids, self.V).float(), torch.zeros(*ids.shape, 1)], -1)
        hidden = []
        for layer in self.layers:
            hidden.append(x)
            x = layer(x)
        out = type("Out", (), {})()
        out.logits, out.hidden_states = x[:, -input_ids.shape[1]:, :self.V], (*hidden, x)
        out.cache = PrefixCache(ids) if use_cache else None
        return out


class Layer(torch.nn.Module):
    def __init__(self, owner, index):
        super().__init__()
        self.owner, self.index = [owner], index

    def forward(self, x):
        m = self.owner[0]
        x = x.clone()
        for b in range(x.shape[0]):
            pairs, asked = m.entries(x[b, :-1, :m.V].argmax(-1))  # the context, never the last token
            if self.index == 1:  # descriptor of the asked entry
                objects = [o for o, _ in pairs]
                x[b, -1, m.V] = (objects.index(asked) if m.mechanism == "positional"
                                 else m.tok.convert_tokens_to_ids(asked))
            if self.index == 2:  # the asked entry's letter
                d = int(x[b, -1, m.V])
                letter = pairs[d][1] if m.mechanism == "positional" else dict(pairs)[m.tok.convert_ids_to_tokens(d)]
                x[b, -1, :m.V] = torch.nn.functional.one_hot(torch.tensor(m.tok.convert_tokens_to_ids(letter)), m.V)
        return x


@pytest.mark.parametrize("mechanism, ratio", [("positional", 0.0), ("symbolic", float("inf"))])
def test_scripted_models_get_all_of_their_label_at_the_right_peak_layer(mechanism, ratio):
    tok = tiny_tokenizer()
    table = interchange(Scripted(tok, mechanism), tok, make_pairs(6, 12, seed=2), USER_ONLY, layers_per_batch=3)
    assert table.attrs["dropped"] == 0 and len(table) == 12 * 4 and table["correct_unpatched"].all()
    by_layer = table.groupby("layer")["label"].agg(lambda s: set(s))
    assert by_layer[0] == by_layer[1] == {"no_effect"}  # layer 1 recomputes what was patched before it
    assert by_layer[2] == {mechanism}
    # after layer 2 the stream holds the counterfactual's answer, the original's letter at s: reflexive, or
    # symbolic where s = w (their checker tries symbolic first)
    sw = table[table["layer"] == 3].eval("s == w")
    assert set(table[table["layer"] == 3]["label"][sw]) <= {"symbolic"}
    assert set(table[table["layer"] == 3]["label"][~sw]) == {"reflexive"}
    summary = summarize(table, 6, fit=False)
    assert summary["peak_layer"] == 2 and summary[f"share_{mechanism}"] == 1.0 and summary["ratio_share"] == ratio


def test_pairs_a_model_fails_unpatched_are_kept_or_dropped_and_counted():
    tok = tiny_tokenizer()
    model = Scripted(tok, "positional")
    pairs = make_pairs(6, 5, seed=3)
    wrong = [type(p)(p.original, p.counterfactual, p.letters, p.entries, {**p.predictions, "no_effect": "Z"})
             for p in pairs[:2]]
    kept = interchange(model, tok, wrong + pairs[2:], USER_ONLY)
    assert kept.attrs["dropped"] == 0 and kept.groupby("pair")["correct_unpatched"].first().tolist() == [0, 0, 1, 1, 1]
    filtered = interchange(model, tok, wrong + pairs[2:], USER_ONLY, filter_correct=True)
    assert filtered.attrs["dropped"] == 2 and sorted(filtered["pair"].unique()) == [2, 3, 4]


def scripted_table(shares_by_layer: list[dict], pairs: int = 20) -> pd.DataFrame:
    """Interchange rows whose label shares per layer are the given ones (the rest no_effect)."""
    rows = []
    for layer, shares in enumerate(shares_by_layer):
        labels = [k for k, v in shares.items() for _ in range(round(v * pairs))]
        labels += ["no_effect"] * (pairs - len(labels))
        rows += [{"pair": p, "layer": layer, "label": lab} for p, lab in enumerate(labels)]
    return pd.DataFrame(rows)


def test_the_peak_is_the_layer_of_highest_positional_plus_symbolic_share_not_a_reflexive_read_out():
    early = {"positional": 0.3, "symbolic": 0.3}
    table = scripted_table([{}, {"positional": 0.1}, early, {"positional": 0.1}, {}, {"reflexive": 1.0},
                            {"reflexive": 1.0}])
    s = summarize(table, 6, fit=False)
    assert s["peak_layer"] == s["first_spike_layer"] == 2 and s["ratio_share"] == 1.0 and s["share_reflexive"] == 0.0


def test_the_peak_section_5_6_and_the_first_spike_appendix_f_where_they_differ():
    two = [{}, {"symbolic": 0.4}, {"positional": 0.1}, {"positional": 0.4, "symbolic": 0.4}, {}]
    s = summarize(scripted_table(two), 6, fit=False)
    assert s["peak_layer"] == 3 and s["first_spike_layer"] == 1  # the maximum 0.8; the first 0.4 >= 0.5 x 0.8
    assert (s["share_positional"], s["share_symbolic"]) == (0.4, 0.4)  # the shares are read at the peak
    bump = [{"symbolic": 0.15}, {}, {"positional": 0.2, "symbolic": 0.2}, {"positional": 0.3, "symbolic": 0.5},
            {"positional": 0.1}]
    s = summarize(scripted_table(bump), 6, fit=False)
    assert s["peak_layer"] == s["first_spike_layer"] == 3  # 0.15 < 0.5 x 0.8; the spike's top is layer 3
    tied = [{"positional": 0.5}, {"symbolic": 0.5}]
    assert summarize(scripted_table(tied), 6, fit=False)["peak_layer"] == 0  # a tie: the first


def test_no_spike_no_peak():
    s = summarize(scripted_table([{"positional": 0.05}, {"reflexive": 0.9}, {"mixed": 0.5}]), 6, fit=False)
    assert s["peak_layer"] is s["first_spike_layer"] is None and np.isnan(s["ratio_share"]) and np.isnan(s["ratio_fit"])
    assert summarize(pd.DataFrame(columns=["pair", "layer", "label"]), 6)["peak_layer"] is None


def minimal_model_rows(w_pos, lexical, reflexive, n=8, count=600, seed=0):
    """Rows whose logits are the minimal model's (sigma 0.7 everywhere) for random entries c, w, s."""
    rng = np.random.default_rng(seed)
    a, rows = np.arange(n), []
    for k in range(count):
        c, w, s = rng.choice(n, 3, replace=False)
        logits = w_pos * np.exp(-((a - c) ** 2) / (2 * 0.7 ** 2)) + lexical * (a == w) + reflexive * (a == s)
        rows.append({"pair": k, "c": c, "w": w, "s": s, "layer": 0, "label": "positional", "logits": list(logits)})
    return pd.DataFrame(rows)


def test_the_fitted_minimal_model_recovers_the_signals_that_made_its_data():
    fit = fit_mechanisms(minimal_model_rows(w_pos=2.0, lexical=3.0, reflexive=1.0), 8)
    assert fit["w_pos"] == pytest.approx(2.0, rel=0.1) and fit["lexical_gate"] == pytest.approx(3.0, rel=0.1)
    assert fit["reflexive_gate"] == pytest.approx(1.0, abs=0.15) and fit["ratio_fit"] == pytest.approx(1.5, rel=0.1)
    assert fit["fit_js"] < 1e-3
    assert fit_mechanisms(minimal_model_rows(2.0, 3.0, 1.0), 8) == fit  # deterministic


def test_table1_gives_each_model_both_ratios_and_each_vlm_its_difference_from_its_llm():
    rows = []
    for model, kind, shares in (("a", "llm", {"positional": 0.4, "symbolic": 0.4}),
                                ("a_vl", "vlm", {"positional": 0.2, "symbolic": 0.6})):
        t = scripted_table([{}, shares])
        t["logits"] = [list(np.linspace(0, 1, 6))] * len(t)
        rows.append(t.assign(model=model, generation="G1", kind=kind, dropped=0, correct_unpatched=True, c=0, w=1,
                             s=2))
    t = table1(pd.concat(rows), BindingConfig(n_entries=6)).set_index("model")
    assert t.loc["a", "ratio_share"] == 1.0 and t.loc["a_vl", "ratio_share"] == pytest.approx(3.0)
    assert t.loc["a_vl", "vlm_minus_llm_share"] == pytest.approx(2.0) and np.isnan(t.loc["a", "vlm_minus_llm_share"])
    assert t.loc["a_vl", "vlm_minus_llm_fit"] == pytest.approx(t.loc["a_vl", "ratio_fit"] - t.loc["a", "ratio_fit"])
    assert (t["peak_layer"] == 1).all() and (t["pairs"] == 20).all() and (t["correct_unpatched"] == 1.0).all()
    assert {"peak_layer_definition", "first_spike_layer_definition", "ratio_share_definition",
            "ratio_fit_definition"} <= set(t.columns)


def test_bad_binding_config_names_the_key():
    with pytest.raises(ValueError, match="qwen.binding.n_entries"):
        BindingConfig(n_entries=41)
    with pytest.raises(ValueError, match="spike_fraction"):
        BindingConfig(spike_fraction=0)


def test_layers_per_batch_sets_memory_only_the_interchange_table_is_the_same(tmp_path):
    """qwen.binding.layers_per_batch is out of the rule's params: a tiny random Qwen model (fp32) patched one layer
    a pass and all layers at once gives the same table, logits to float rounding."""
    model, tok = tiny("qwen2")
    pairs = make_pairs(6, 2, seed=0)
    one, all_ = (interchange(model, tok, pairs, Chat(), layers_per_batch=n) for n in (1, 64))
    logits = [c for c in one.columns if "logit" in c]
    pd.testing.assert_frame_equal(one.drop(columns=logits), all_.drop(columns=logits))
    assert logits
    for c in logits:
        np.testing.assert_allclose(np.stack(one[c]), np.stack(all_[c]), rtol=1e-4, atol=1e-4)


def test_the_schema_bounds_n_entries_by_the_boxes_a_prompt_can_name():
    """qwen.binding.n_entries: the schema's maximum (checked at DAG build, below the Qwen modules) is the number of
    boxes BindingConfig can letter and fill (its own check), one number checked against the other."""
    from vlbind.core.schema import section_schema
    from vlbind.qwen.binding import LETTERS, BindingConfig
    from vlbind.qwen.words import BOX_OBJECTS

    most = min(len(BOX_OBJECTS), len(LETTERS))
    assert section_schema("qwen.binding")["properties"]["n_entries"]["maximum"] == most
    BindingConfig(n_entries=most)
    with pytest.raises(ValueError, match="n_entries"):
        BindingConfig(n_entries=most + 1)
