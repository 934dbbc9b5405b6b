"""Probes on pretrained models (vlbind.qwen.probes): the probed tokens and their labels re-derived from the
prompt text, and a tiny Qwen model probed end to end."""

import re

import numpy as np

from vlbind.qwen.probes import ROLES, make_prompt, probe_table, token_positions
from vlbind.qwen.tiny import tiny, tiny_tokenizer
from vlbind.qwen.words import COLOR_WORDS, SHAPE_WORDS

SYSTEM = "You are a helpful assistant."


def test_probed_tokens_are_the_shape_words_and_labels_their_colors_in_the_text():
    tok = tiny_tokenizer()
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = make_prompt(rng, 6)
        context = re.search(r"Context: (.*?)\. Associations", p.text)[1]
        color_of = {shape: color for color, shape in (pair.split() for pair in context.split(", "))}
        assoc = [pair.split()[0] for pair in re.search(r"Associations: (.*?)\. Question", p.text)[1].split(", ")]
        ids, positions = token_positions(tok, p, SYSTEM)
        words = tok.convert_ids_to_tokens(ids[0].tolist())
        for role in ROLES:
            shapes = [words[t] for t in positions[role]]
            assert all(s in SHAPE_WORDS for s in shapes)
            assert [COLOR_WORDS[c] for c in p.colors] == [color_of[s] for s in shapes]
        assert sorted(positions["association shape"]) == [words.index(s, positions["context shape"][-1] + 1)
                                                          for s in assoc]


def test_a_tiny_qwen_model_is_probed_at_every_layer_with_chance():
    model, tok = tiny("qwen2_5_vl")
    t = probe_table(model, tok, train_prompts=24, test_prompts=12, n_objects=4, ridge=1.0, seed=0,
                    system_prompt=SYSTEM)
    assert set(t["role"]) == set(ROLES) and sorted(t["layer"].unique()) == [0, 1]
    assert t["accuracy"].between(0, 1).all() and t["chance"].between(0, 1).all()
