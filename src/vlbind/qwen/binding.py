"""Binding mechanisms of pretrained models by interchange interventions (paper, section 6.3, Table 1), on
Gur-Arieh et al.'s boxes task.

    original:        the cup is in Box A, the key is in Box F, ... and the ring is in Box C. Which box is the key in?
    counterfactual:  the original with the payloads (letters) at entries c and s swapped and the keys (objects) at
                     entries c and w swapped, queried for the key now at c.

Patching the counterfactual's last-token residual stream entering decoder layer L into the original run (a
forward pre-hook) makes the model answer, if it binds
    positionally: the original letter at c;   symbolically ("lexical"): the original letter of key w;
    reflexively: the original letter at s;    no effect: the original answer (entry q);
anything else is "mixed". q, c, w and s are distinct, so the four predictions are too. The prediction is the
argmax of the last-token logits over the prompt's letters; the assistant turn starts with "Box", so the next
token is the letter. Pairs the model answers wrongly unpatched are dropped and counted.

Peak layer: the layer with the largest share of changed answers (the earliest on a tie). Ratio: share symbolic /
share positional at the peak layer (inf where nothing is positional). We do not fit the minimal model of
Gur-Arieh et al. (their signal ratio): neither paper states it, and their fitting code is not ported here;
table1.csv states which ratio it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from .models import decoder_layers
from .prompts import chat_text
from .words import BOX_OBJECTS

LETTERS = tuple(chr(c) for c in range(ord("A"), ord("Z") + 1))
LABELS = ("positional", "symbolic", "reflexive", "no_effect", "mixed")


@dataclass(frozen=True)
class BoxesPair:
    original: str
    counterfactual: str
    letters: tuple[str, ...]  # the original's letters, entry order
    predictions: dict  # label -> letter, for positional, symbolic, reflexive, no_effect


def boxes_text(objects, letters, query: str) -> str:
    clauses = [f"the {o} is in Box {b}" for o, b in zip(objects, letters)]
    listed = clauses[0] if len(clauses) == 1 else ", ".join(clauses[:-1]) + " and " + clauses[-1]
    return f"{listed[0].upper()}{listed[1:]}. Which box is the {query} in?"


def make_pairs(n_entries: int, count: int, seed: int) -> list[BoxesPair]:
    """`count` pairs of `n_entries` (>= 4) boxes each, drawn from `seed`."""
    if not 4 <= n_entries <= len(BOX_OBJECTS):
        raise ValueError(f"n_entries={n_entries}: needs 4 distinct entries q, c, w, s and at most {len(BOX_OBJECTS)}")
    rng, out = np.random.default_rng(seed), []
    for _ in range(count):
        objects = [BOX_OBJECTS[i] for i in rng.permutation(len(BOX_OBJECTS))[:n_entries]]
        letters = [LETTERS[i] for i in rng.permutation(len(LETTERS))[:n_entries]]
        q, c, w, s = (int(i) for i in rng.permutation(n_entries)[:4])
        cf_objects, cf_letters = list(objects), list(letters)
        cf_letters[c], cf_letters[s] = letters[s], letters[c]
        cf_objects[c], cf_objects[w] = objects[w], objects[c]
        predictions = {"positional": letters[c], "symbolic": letters[w], "reflexive": letters[s],
                       "no_effect": letters[q]}
        out.append(BoxesPair(boxes_text(objects, letters, objects[q]),
                             boxes_text(cf_objects, cf_letters, cf_objects[c]), tuple(letters), predictions))
    return out


def label_of(letter: str, predictions: dict) -> str:
    return next((k for k, v in predictions.items() if v == letter), "mixed")


def chat_ids(tokenizer, text: str, system_prompt: str) -> torch.Tensor:
    """(1, T) ids: the chat with the question as the user's turn and the assistant's reply begun with "Box"."""
    chat = chat_text(tokenizer, text, system_prompt) + "Box"
    return tokenizer(chat, return_tensors="pt", add_special_tokens=False)["input_ids"]


def letter_ids(tokenizer, letters) -> list[int]:
    return [tokenizer.encode(" " + b, add_special_tokens=False)[-1] for b in letters]


def run_patched(model, ids: torch.Tensor, layer: int | None = None, values: torch.Tensor | None = None,
                positions=slice(-1, None), record: list | None = None) -> torch.Tensor:
    """Logits (1, T, V) of `ids`; with `layer`, the stream entering that decoder layer at `positions` replaced by
    `values`; with `record`, the stream entering every layer is appended to it (before any patch)."""
    def hook(index):
        def fn(module, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            if record is not None:
                record.append(x.detach().clone())
            if index == layer:
                x = x.clone()
                x[:, positions] = values.to(x.dtype)
                return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})
            return None
        return fn

    handles = [m.register_forward_pre_hook(hook(i), with_kwargs=True) for i, m in enumerate(decoder_layers(model))]
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits
    finally:
        for h in handles:
            h.remove()


def interchange(model, tokenizer, pairs: list[BoxesPair], system_prompt: str, device: str = "cpu") -> pd.DataFrame:
    """One row per (kept pair, layer): the patched prediction's label. `attrs['dropped']` counts the pairs the
    model answered wrongly unpatched."""
    rows, dropped = [], 0
    n_layers = len(decoder_layers(model))
    for k, pair in enumerate(pairs):
        ids = chat_ids(tokenizer, pair.original, system_prompt).to(device)
        cf_ids = chat_ids(tokenizer, pair.counterfactual, system_prompt).to(device)
        candidates = letter_ids(tokenizer, pair.letters)
        clean = run_patched(model, ids)[0, -1, candidates].argmax().item()
        if pair.letters[clean] != pair.predictions["no_effect"]:
            dropped += 1
            continue
        cf_stream: list = []
        run_patched(model, cf_ids, record=cf_stream)
        for layer in range(n_layers):
            logits = run_patched(model, ids, layer, cf_stream[layer][:, -1:])
            letter = pair.letters[logits[0, -1, candidates].argmax().item()]
            rows.append({"pair": k, "layer": layer, "label": label_of(letter, pair.predictions)})
    table = pd.DataFrame(rows, columns=["pair", "layer", "label"])
    table.attrs["dropped"] = dropped
    return table


def summarize(table: pd.DataFrame) -> dict:
    """Peak layer (largest share of changed answers, earliest on a tie), the label shares there, and the ratio
    share symbolic / share positional at the peak; NaN where no pair was kept."""
    if table.empty:  # every pair dropped: the model never answered right unpatched
        return {"peak_layer": None, "ratio": float("nan"), **{f"share_{k}": float("nan") for k in LABELS}}
    shares = pd.crosstab(table["layer"], table["label"], normalize="index").reindex(columns=LABELS, fill_value=0.0)
    changed = 1.0 - shares["no_effect"]
    peak = int(changed.idxmax())
    at = shares.loc[peak]
    ratio = at["symbolic"] / at["positional"] if at["positional"] > 0 else float("inf")
    return {"peak_layer": peak, "ratio": float(ratio), **{f"share_{k}": float(at[k]) for k in LABELS}}


def table1(df: pd.DataFrame) -> pd.DataFrame:
    """Table 1 from the interchange rows of every model (columns model, generation, kind, pair, layer, label,
    dropped): per model the peak layer and ratio, and for each VLM its ratio minus its generation's LLM's."""
    rows = []
    for (model, generation, kind), t in df.groupby(["model", "generation", "kind"], sort=False):
        rows.append({"model": model, "generation": generation, "kind": kind, **summarize(t),
                     "pairs_kept": t["pair"].nunique(), "pairs_dropped": int(t["dropped"].iloc[0]),
                     "ratio_definition": "share symbolic / share positional at the peak layer"})
    out = pd.DataFrame(rows)
    llm = out[out["kind"] == "llm"].groupby("generation")["ratio"].first()
    out["vlm_minus_llm"] = [r.ratio - llm[r.generation] if r.kind == "vlm" and r.generation in llm else float("nan")
                            for r in out.itertuples()]
    return out
