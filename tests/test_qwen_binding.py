"""Interchange interventions on pretrained models (vlbind.qwen.binding): the boxes pairs re-derived from their
text, patching against plain runs of a tiny Qwen model, and scripted positional / symbolic models that must get
100 % of their label at the right peak layer with the right ratio."""

import re

import pytest
import torch

from vlbind.qwen.binding import chat_ids, interchange, make_pairs, run_patched, summarize
from vlbind.qwen.tiny import tiny, tiny_tokenizer

SYSTEM = "You are a helpful assistant."


def boxes(text):
    """{object: letter} and the queried object, read from a prompt's text."""
    return dict(re.findall(r"[Tt]he (\w+) is in Box (\w)", text)), re.search(r"Which box is the (\w+) in\?", text)[1]


def test_every_pair_gives_four_distinct_predictions_rederived_from_its_texts():
    for pair in make_pairs(6, 50, seed=1):
        orig, q = boxes(pair.original)
        cf, cf_q = boxes(pair.counterfactual)
        objects, cf_objects = list(orig), list(cf)
        c = cf_objects.index(cf_q)  # the counterfactual queries its entry c
        assert pair.predictions["no_effect"] == orig[q]
        assert pair.predictions["positional"] == orig[objects[c]]  # the original's letter at entry c
        assert pair.predictions["symbolic"] == orig[cf_q]  # the original's letter of the queried key
        assert pair.predictions["reflexive"] == cf[cf_q]  # the counterfactual's own answer
        assert len(set(pair.predictions.values())) == 4


def test_patching_the_whole_stream_entering_layer_0_reproduces_the_counterfactual():
    model, tok = tiny("qwen2_vl")
    pair = make_pairs(5, 1, seed=0)[0]
    ids, cf_ids = chat_ids(tok, pair.original, SYSTEM), chat_ids(tok, pair.counterfactual, SYSTEM)
    assert ids.shape == cf_ids.shape
    stream = []
    cf_logits = run_patched(model, cf_ids, record=stream)
    patched = run_patched(model, ids, 0, stream[0], positions=slice(None))
    torch.testing.assert_close(patched, cf_logits)


def test_patching_the_last_token_changes_only_the_last_position():
    model, tok = tiny("qwen3")
    pair = make_pairs(5, 1, seed=0)[0]
    ids, cf_ids = chat_ids(tok, pair.original, SYSTEM), chat_ids(tok, pair.counterfactual, SYSTEM)
    stream = []
    run_patched(model, cf_ids, record=stream)
    plain, patched = run_patched(model, ids), run_patched(model, ids, 1, stream[1][:, -1:])
    torch.testing.assert_close(patched[:, :-1], plain[:, :-1])
    assert not torch.allclose(patched[:, -1], plain[:, -1])


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

    def forward(self, input_ids):
        x = torch.cat([torch.nn.functional.one_hot(input_ids, self.V).float(), torch.zeros(*input_ids.shape, 1)], -1)
        for layer in self.layers:
            x = layer(x)
        return type("Out", (), {"logits": x[..., :self.V]})


class Layer(torch.nn.Module):
    def __init__(self, owner, index):
        super().__init__()
        self.owner, self.index = [owner], index

    def forward(self, x):
        m = self.owner[0]
        x = x.clone()
        pairs, asked = m.entries(x[0, :-1, :m.V].argmax(-1))  # the context, never the last token
        if self.index == 1:  # descriptor of the asked entry
            objects = [o for o, _ in pairs]
            x[0, -1, m.V] = objects.index(asked) if m.mechanism == "positional" else m.tok.convert_tokens_to_ids(asked)
        if self.index == 2:  # the asked entry's letter
            d = int(x[0, -1, m.V])
            letter = (pairs[d][1] if m.mechanism == "positional"
                      else dict(pairs)[m.tok.convert_ids_to_tokens(d)])
            x[0, -1, :m.V] = torch.nn.functional.one_hot(torch.tensor(m.tok.convert_tokens_to_ids(letter)), m.V)
        return x


@pytest.mark.parametrize("mechanism, ratio", [("positional", 0.0), ("symbolic", float("inf"))])
def test_scripted_models_get_all_of_their_label_at_the_right_peak_layer(mechanism, ratio):
    tok = tiny_tokenizer()
    table = interchange(Scripted(tok, mechanism), tok, make_pairs(6, 12, seed=2), SYSTEM)
    assert table.attrs["dropped"] == 0 and len(table) == 12 * 4
    by_layer = table.groupby("layer")["label"].agg(lambda s: set(s))
    assert by_layer[0] == by_layer[1] == {"no_effect"}  # layer 1 recomputes what was patched before it
    assert by_layer[2] == {mechanism} and by_layer[3] == {"reflexive"}  # after layer 2: the answer itself
    summary = summarize(table)
    assert summary["peak_layer"] == 2 and summary[f"share_{mechanism}"] == 1.0 and summary["ratio"] == ratio


def test_pairs_a_model_fails_unpatched_are_dropped_and_counted():
    tok = tiny_tokenizer()
    model = Scripted(tok, "positional")
    pairs = make_pairs(6, 5, seed=3)
    wrong = [type(p)(p.original, p.counterfactual, p.letters, {**p.predictions, "no_effect": "Z"}) for p in pairs[:2]]
    table = interchange(model, tok, wrong + pairs[2:], SYSTEM)
    assert table.attrs["dropped"] == 2 and sorted(table["pair"].unique()) == [2, 3, 4]


def test_table1_gives_each_vlm_its_ratio_minus_its_generations_llm():
    import pandas as pd

    rows = []
    for model, kind, gen, labels in (("a", "llm", "G1", ["positional"] * 2 + ["symbolic"] * 2),
                                     ("a_vl", "vlm", "G1", ["positional"] + ["symbolic"] * 3)):
        for pair, label in enumerate(labels):
            rows += [{"model": model, "generation": gen, "kind": kind, "dropped": 1, "pair": pair, "layer": 0,
                      "label": "no_effect"}, {"model": model, "generation": gen, "kind": kind, "dropped": 1,
                                              "pair": pair, "layer": 1, "label": label}]
    t = __import__("vlbind.qwen.binding", fromlist=["table1"]).table1(pd.DataFrame(rows)).set_index("model")
    assert t.loc["a", "ratio"] == 1.0 and t.loc["a_vl", "ratio"] == 3.0 and t.loc["a_vl", "vlm_minus_llm"] == 2.0
    assert (t["peak_layer"] == 1).all() and (t["pairs_kept"] == 4).all() and (t["pairs_dropped"] == 1).all()
    assert summarize(pd.DataFrame(columns=["pair", "layer", "label"]))["peak_layer"] is None
