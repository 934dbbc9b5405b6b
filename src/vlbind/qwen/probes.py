"""Linear probes on pretrained models (paper, section G.6 and appendix H; Fig 14, Fig 15): is an object's color
decodable at its shape token, in the context (where symbolic binding binds it) and in the association list
(where it propagates)? The colored-shapes indirect retrieval task in words, our wording [assumption]:

    Context: red circle, blue star, green heart. Associations: star item4, heart item9, circle item2.
    Question: Which item goes with the blue shape? Answer:

given as the user's turn of the chat template. The residual stream entering each decoder layer is read
(`output_hidden_states`) at the shape word's last sub-token; the probe is the scratch models' ridge classifier
(vlbind.interp.probes.fit_and_score), trained on one set of prompts and scored on another, with its chance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..interp.probes import ProbeConfig, fit_and_score
from .models import decoder_layers
from .prompts import chat_text
from .words import COLOR_WORDS, ITEM_WORDS, SHAPE_WORDS

ROLES = ("context shape", "association shape")


@dataclass(frozen=True)
class ProbePrompt:
    text: str
    colors: tuple[int, ...]  # color index of each object, context order
    spans: dict  # role -> [(start, end) character span of each object's shape word]; association spans in context order


def make_prompt(rng: np.random.Generator, n_objects: int) -> ProbePrompt:
    colors, shapes, items = (rng.permutation(len(pool))[:n_objects] for pool in (COLOR_WORDS, SHAPE_WORDS, ITEM_WORDS))
    order = rng.permutation(n_objects)
    text, context, association = "Context: ", [None] * n_objects, [None] * n_objects
    for j in range(n_objects):
        text += f"{COLOR_WORDS[colors[j]]} "
        context[j] = (len(text), len(text) + len(SHAPE_WORDS[shapes[j]]))
        text += SHAPE_WORDS[shapes[j]] + (", " if j < n_objects - 1 else ". Associations: ")
    for k, j in enumerate(order):
        association[j] = (len(text), len(text) + len(SHAPE_WORDS[shapes[j]]))
        text += f"{SHAPE_WORDS[shapes[j]]} {ITEM_WORDS[items[j]]}" + (", " if k < n_objects - 1 else ". ")
    query = COLOR_WORDS[colors[rng.integers(n_objects)]]
    text += f"Question: Which item goes with the {query} shape? Answer:"
    spans = {"context shape": context, "association shape": association}
    return ProbePrompt(text, tuple(int(c) for c in colors), spans)


def token_positions(tokenizer, prompt: ProbePrompt, system_prompt: str) -> tuple[torch.Tensor, dict]:
    """(ids (1, T), role -> token index of each object's shape word, its last sub-token)."""
    chat = chat_text(tokenizer, prompt.text, system_prompt)
    base = chat.index(prompt.text)
    enc = tokenizer(chat, return_offsets_mapping=True, add_special_tokens=False, return_tensors="pt")
    offsets = enc["offset_mapping"][0].tolist()

    def last_token(end: int) -> int:
        return next(i for i, (a, b) in enumerate(offsets) if a < base + end <= b)

    return enc["input_ids"], {role: [last_token(e) for _, e in spans] for role, spans in prompt.spans.items()}


@torch.no_grad()
def collect(model, tokenizer, prompts: list[ProbePrompt], system_prompt: str, device: str = "cpu"):
    """role -> (features (L, N, d) entering each decoder layer, color labels (N,))."""
    n_layers = len(decoder_layers(model))
    feats = {r: [] for r in ROLES}
    labels = {r: [] for r in ROLES}
    for p in prompts:
        ids, positions = token_positions(tokenizer, p, system_prompt)
        hidden = model(input_ids=ids.to(device), output_hidden_states=True).hidden_states[:n_layers]
        stack = torch.stack([h[0] for h in hidden]).float().cpu().numpy()  # (L, T, d)
        for role in ROLES:
            feats[role].append(stack[:, positions[role]])
            labels[role].append(np.array(p.colors))
    return {r: (np.concatenate(feats[r], axis=1), np.concatenate(labels[r])) for r in ROLES}


def probe_table(model, tokenizer, *, train_prompts: int, test_prompts: int, n_objects: int, ridge: float,
                seed: int, system_prompt: str, device: str = "cpu") -> pd.DataFrame:
    """Tidy rows: role, layer, accuracy, chance (color decoded at the shape token)."""
    rng = np.random.default_rng(seed)
    train, test = (collect(model, tokenizer, [make_prompt(rng, n_objects) for _ in range(n)], system_prompt, device)
                   for n in (train_prompts, test_prompts))
    rows = []
    for role in ROLES:
        acc, chance = fit_and_score(*train[role], *test[role], ProbeConfig(ridge=ridge))
        rows += [{"role": role, "layer": layer, "accuracy": float(a), "chance": chance} for layer, a in enumerate(acc)]
    return pd.DataFrame(rows)
