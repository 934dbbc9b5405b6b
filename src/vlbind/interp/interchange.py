"""Interchange interventions that tell binding mechanisms apart (paper, section 5.2 and appendix F; the
method of Gur-Arieh, Geva & Geiger 2025, "Mixing Mechanisms", adapted to the two-hop task).

From an original prompt (query slot q) we build a counterfactual in which every mechanism predicts a
different item once the counterfactual's residual stream at [ANSWER] (entering block L) is patched into
the original run. With distinct slots q, c, w, x, s:

- the counterfactual's queried color is the original color of slot w, placed at slot c (colors of c and
  w swapped);
- the shape at slot c is the original shape of slot x (shapes of c and x swapped);
- that shape's item is the original item of slot s (items of shapes x and s swapped).

So the counterfactual is a valid prompt whose answer is item(s), and the patched original run predicts:

    positional  item of the original shape at slot c   (the patch carries "the c-th object")
    color_key   item of shape w                         (it carries the color, matched again)
    shape_key   item of shape x                         (it carries the shape)
    reflexive   item of shape s                         (it carries the answer itself)
    no_effect   item of shape q                         (it carries nothing that matters)

and anything else is `mixed`. Predictions are the argmax over the items present in the prompt. Pairs the
model gets wrong (original or counterfactual, unpatched) are dropped and counted.

Where the residual is patched (`position`, POSITIONS): at [ANSWER] (the paper's and Gur-Arieh et al.'s last
token), at the query token before it, or at both. A model that computes its answer at the query token and copies
it to [ANSWER] late shows nothing at [ANSWER] before that copy ("no effect" at every layer before the read-out):
the query position shows its mechanism. A query patch entering the first block swaps the query token only.
Following appendix F, the first layer where patching has an effect shows the mechanism; a reflexive label
late in the network is a readout of an answer already computed (the labelling rule: interp.circuits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from vlbind.core.settings import config_defaults
from vlbind.data.batching import in_batches
from vlbind.data.spec import StageSpec, in_order, text_retrieval_spec
from vlbind.data.tasks import BY_COLOR, RETRIEVAL, Batch, assemble, generate
from vlbind.interp.mechanisms import SCRATCH_LABELS
from vlbind.model.hooks import hook_name, resid_name
from vlbind.model.inference import answer_logits, model_inputs
from vlbind.model.transformer import Transformer

LABELS = SCRATCH_LABELS  # vlbind.interp.mechanisms: the vocabulary circuits.csv and table1.csv share
MECHANISMS = LABELS[:-1]  # the five a patched answer can follow; anything else is "mixed"
# Text prompts of the full vocabulary with 5..8 objects (five distinct slots); sweep() sets the list's order.
INTERCHANGE_SPEC = text_retrieval_spec(5, 8)
# where the counterfactual's residual is patched in (module doc): the indices it replaces of (query token, [ANSWER])
POSITIONS = {"answer": (1,), "query": (0,), "both": (0, 1)}


@dataclass(frozen=True)
@config_defaults("interp.interchange")
class InterchangeConfig:
    """Config key interp.interchange (defaults: config.yaml's)."""
    pairs: int  # pairs generated per model; those the model answers (both prompts) are kept
    seed: int


@dataclass
class Pairs:
    original: Batch
    counterfactual: Batch
    slots: np.ndarray  # (B, 5): q, c, w, x, s
    predictions: np.ndarray  # (B, 5): item token id each mechanism predicts, in MECHANISMS order

    def __len__(self) -> int:
        return len(self.original)

    def in_batches(self, size: int) -> list[Pairs]:
        """Consecutive batches of `size` pairs (batching.in_batches): the pairs do not depend on the batch size."""
        starts = range(0, len(self), size)
        return [Pairs(o, cf, self.slots[i:i + size], self.predictions[i:i + size]) for i, o, cf in
                zip(starts, in_batches(self.original, size), in_batches(self.counterfactual, size), strict=True)]


def make_pairs(batch_size: int, rng: np.random.Generator, spec: StageSpec = INTERCHANGE_SPEC) -> Pairs:
    """Original prompts (query by color, no noise) and their counterfactuals, built as the module says."""
    if spec.min_objects < 5:
        raise ValueError(f"interchange pairs need >= 5 objects per prompt (five distinct slots), spec has "
                         f"min_objects={spec.min_objects}")
    o = generate(spec, batch_size, rng, kind=RETRIEVAL, query_by=BY_COLOR, noise=False)
    B, P = o.colors.shape
    rows = np.arange(B)
    keys = np.where(np.arange(P)[None, :] < o.n_objects[:, None], rng.random((B, P)), 2.0)
    keys[rows, o.query_slot] = -1.0  # q first, then four other distinct slots
    q, c, w, x, s = np.argsort(keys, axis=1)[:, :5].T
    colors, shapes, items = o.colors.copy(), o.shapes.copy(), o.items.copy()
    colors[rows, c], colors[rows, w] = o.colors[rows, w], o.colors[rows, c]
    shapes[rows, c], shapes[rows, x] = o.shapes[rows, x], o.shapes[rows, c]
    # items follow shapes: slot c now shows shape x, which gets item s; slot x shows shape c (keeps item c);
    # shape s (still at slot s) gets item x
    items[rows, c], items[rows, x], items[rows, s] = o.items[rows, s], o.items[rows, c], o.items[rows, x]
    cf = assemble(n=o.n_objects, colors=colors, shapes=shapes, items=items, entry_slots=o.association_slots,
                  query_slot=c, kind=o.kind, query_by=o.query_by, gap=o.noise)
    predictions = np.stack([o.items[rows, c], o.items[rows, w], o.items[rows, x], o.items[rows, s],
                            o.items[rows, q]], axis=1)
    return Pairs(o, cf, np.stack([q, c, w, x, s], axis=1), predictions)


def label_predictions(predicted: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """Label index (into LABELS) of each predicted item: the mechanism that predicts it, else mixed."""
    match = predicted[..., None] == predictions  # (..., 5)
    return np.where(match.any(-1), match.argmax(-1), LABELS.index("mixed"))


def _last_two(batch: Batch, device) -> torch.Tensor:
    """(B, 2) indices of each prompt's query token and [ANSWER], its last two positions."""
    return torch.as_tensor(np.stack([batch.answer_pos - 1, batch.answer_pos], 1), device=device)


@torch.no_grad()
def query_answer_residuals(model: Transformer, batch: Batch, layers: list[int], device="cpu") -> torch.Tensor:
    """(len(layers), B, 2, d) residual stream at each prompt's query token and [ANSWER] entering each layer."""
    rows, at = torch.arange(len(batch), device=device)[:, None], _last_two(batch, device)
    names = [resid_name(layer, model.cfg.n_layers) for layer in layers]
    _, cache = model.residual_with_cache(names, *model_inputs(batch, device)[:2])
    return torch.stack([cache[name][rows, at] for name in names])


@torch.no_grad()
def patched_answer_logits(model: Transformer, batch: Batch, layers: list[int], values: torch.Tensor,
                          device="cpu", positions: tuple[str, ...] = ("answer",)) -> torch.Tensor:
    """(len(positions), len(layers), B, vocab) answer logits of `batch` with the residual at positions[j]
    (POSITIONS: [ANSWER], the query token or both) entering layer layers[i] replaced by values[i] (B, 2, d: the
    counterfactual's at its query token and [ANSWER], query_answer_residuals).

    The query token and [ANSWER] are each prompt's last two positions, so a patch there changes no earlier
    position. The clean run is therefore computed once with its keys and values cached, and only the last two
    positions are recomputed, as len(positions) x len(layers) independent streams of two per prompt, each patched
    where its layer begins (Transformer.extend): one pass for all positions, layers and prompts, about 2/T of a
    full forward per position and layer.
    Equal to patching full forward passes layer by layer (tests, benchmarks/).
    """
    for position in positions:
        if position not in POSITIONS:
            raise ValueError(f"interchange position {position!r}; valid: {list(POSITIONS)}")
    n = model.cfg.n_layers
    tokens, rope_ids, _ = model_inputs(batch, device)
    names = [hook_name(i, f"attn.hook_{kv}") for i in range(n) for kv in "kv"]
    _, cache = model.residual_with_cache(names, tokens, rope_ids)
    rows, at = torch.arange(len(batch), device=device)[:, None], _last_two(batch, device)
    valid = torch.arange(tokens.shape[1], device=device)[None, :] < at[:, :1]  # strictly before the query token
    P, L = len(positions), len(layers)
    x = model.embed(tokens[rows, at]).repeat(1, P * L, 1)  # (B, 2PL, d): streams (query, [ANSWER]) per (p, layer)
    patched = torch.zeros(P, 2, dtype=torch.bool, device=device)
    for j, position in enumerate(positions):
        patched[j, list(POSITIONS[position])] = True
    layer_of = torch.as_tensor(layers, device=device).repeat_interleave(2).repeat(P)
    start = torch.where(patched.repeat_interleave(L, 0).flatten(), layer_of, n + 1)
    keys = [cache[hook_name(i, "attn.hook_k")] for i in range(n)]
    vals = [cache[hook_name(i, "attn.hook_v")] for i in range(n)]
    out = model.extend(x, rope_ids[rows, at].repeat(1, P * L), keys, vals, valid, stream=2, start=start,
                       inject=values.transpose(0, 1).flatten(1, 2).repeat(1, P, 1))
    return model.logits(out[:, 1::2]).unflatten(1, (P, L)).permute(1, 2, 0, 3)


def item_argmax(logits: torch.Tensor, batch: Batch) -> np.ndarray:
    """Argmax over the items present in each prompt; logits (..., B, vocab) -> (..., B) item token ids."""
    items = torch.as_tensor(np.where(batch.items >= 0, batch.items, batch.items.max()), device=logits.device)
    scores = logits.gather(-1, items.expand(*logits.shape[:-1], items.shape[-1]))
    scores = scores.masked_fill(torch.as_tensor(batch.items < 0, device=logits.device), float("-inf"))
    return items.expand_as(scores).gather(-1, scores.argmax(-1, keepdim=True)).squeeze(-1).cpu().numpy()


@torch.no_grad()
def sweep(model: Transformer, n_pairs: int, seed: int, batch_size: int = 128, device="cpu",
          layers: list[int] | None = None, *, order: str,
          positions: tuple[str, ...] = tuple(POSITIONS)) -> tuple[pd.DataFrame, dict]:
    """Label shares per patched position and layer: tidy rows (position, layer, label, fraction, count), on pairs
    whose association lists are in `order` (spec.ORDERS), drawn at once and run `batch_size` at a time (the pairs do
    not depend on it). Returns (table, info) where info counts generated, kept and dropped pairs."""
    model.eval()
    n = model.cfg.n_layers
    layers = list(range(n + 1)) if layers is None else layers
    read = sorted({*layers, n})  # the stream after the last block gives the counterfactual's own answer
    rng = np.random.default_rng([seed, 0x1C])
    spec = in_order(INTERCHANGE_SPEC, order)
    counts = np.zeros((len(positions), len(layers), len(LABELS)), dtype=np.int64)
    generated = kept = 0
    for pairs in make_pairs(n_pairs, rng, spec).in_batches(batch_size):
        generated += len(pairs)
        o, cf = pairs.original, pairs.counterfactual
        cf_resid = query_answer_residuals(model, cf, read, device)
        ok = ((item_argmax(answer_logits(model, o, device), o) == o.target)
              & (item_argmax(model.logits(cf_resid[read.index(n), :, 1]), cf) == cf.target))
        if not ok.any():
            continue
        o, preds = o.subset(ok), pairs.predictions[ok]
        kept += int(ok.sum())
        values = cf_resid[[read.index(layer) for layer in layers]][:, torch.as_tensor(ok, device=cf_resid.device)]
        predicted = item_argmax(patched_answer_logits(model, o, layers, values, device, positions), o)  # (P, L, B)
        labels = label_predictions(predicted, preds[None, None])
        for p in range(len(positions)):
            for i in range(len(layers)):
                counts[p, i] += np.bincount(labels[p, i], minlength=len(LABELS))
    rows = [{"position": position, "layer": layer, "label": label, "count": int(counts[p, i, j]),
             "fraction": counts[p, i, j] / max(kept, 1)}
            for p, position in enumerate(positions) for i, layer in enumerate(layers)
            for j, label in enumerate(LABELS)]
    return pd.DataFrame(rows), {"generated": generated, "kept": kept, "dropped": generated - kept}


SETTINGS = InterchangeConfig  # its config section, interp.interchange (vlbind.interp.settings)
FIGURES = ("fig4", "fig9")  # drawn from its tables; declares the analysis (interp.ANALYSES)


def run(model: Transformer, cfg: InterchangeConfig, device: str, order: str) -> tuple[pd.DataFrame, dict]:
    """The analysis as the DAG runs it (interp.analyze), with its settings (config key interp.interchange)."""
    table, info = sweep(model, cfg.pairs, cfg.seed, device=device, order=order)
    return table, {"pairs_generated": info["generated"], "pairs_kept": info["kept"]}
