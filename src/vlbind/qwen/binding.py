"""Binding mechanisms of pretrained models by interchange interventions (paper, section 5.6, Table 1), on
Gur-Arieh et al.'s boxes task as their code runs it (github.com/yoavgur/mixing-mechs: grammar/schemas.py
SCHEMA_BOXES, training.py ppkn_simpler_counterfactual_template_split_key_loc, tasks/dist.py get_dist).

    original:  The cup is in Box F, the key is in Box A, and the ring is in Box C. Respond in one word, only
               the answer and nothing else: Which box is the key in? Box Answer:
    counterfactual: the original with the letters at entries c and s swapped, then the objects at entries c
               and w swapped, queried for the object now at c (the original's object w).

q (the original's query) and c differ; s and w are each drawn from the other entries, independently, so
s = w can happen (as in their sampler). The prompt is the user's turn of the chat template; the residual
stream of the template's last token entering decoder layer L is replaced by the counterfactual's, and the
answer is the argmax of the last-token logits over the prompt's letters (" A", " F", ...). The answer is
    positional: the original letter at c;   symbolic ("lexical"): the original letter of object w;
    reflexive: the original letter at s;    no effect: the original answer (entry q);
checked in that order (their checker's order: with s = w the answer counts as symbolic), else "mixed".
Every pair is kept (their default, no filtering) unless `filter_correct`. The prompt is rendered as their
format_prompt renders it (`their_chat`): the user's turn only (a system turn with `system_turn`) and no thinking
flag, each template's default. So Qwen3-8B (thinking on by default) and Qwen3-VL-8B-Instruct (a template without
the switch) both end at the assistant turn's opening, `assistant\n`, and the same kind of token is patched in
both; qwen.chat's `thinking: false` would end Qwen3-8B's prompt in an empty think block instead. The rows
record the patched token (`patched_token`).

The layer sweep is batched: the prompt's prefix (all but the last token) is run once and its key/value cache
shared by one batch of last-token runs, the unpatched one and one per patched layer; patching the last token
cannot change the prefix, so this equals a full forward per layer (tested).

Summaries of the rows of one model (`summarize`), with `effect(L)` = share positional + share symbolic at L:
- peak layer: the layer with the highest effect (paper, section 5.6: "we identified the layer with the highest
  intervention effect as the primary binding layer"); none when that maximum is below min_effect (our
  assumption: no binding layer in noise). The reflexive share stays a column.
- first-spike layer, beside it: the first layer where effect >= spike_fraction * its maximum, followed up while
  effect keeps rising (a spike's top): appendix F's rule for the from-scratch models ("the first spike in
  causal effect"), which a reflexive read-out cannot win either. Table 1 reads the peak.
- share ratio: share symbolic / share positional at the peak layer (inf where nothing is positional).
- fitted ratio (Gur-Arieh et al.'s causal_model.py MinimalModel, fitted here to the peak layer's pairs): the
  patched distribution over the n entries is modelled as softmax over entries a of
      w_pos * exp(-(a - c)^2 / (2 sigma(c)^2)) + gate_k[w] * 1{a = w} + gate_i[s] * 1{a = s},
  sigma a quadratic in c / n, gate_k and gate_i one value per entry index, fitted by Adam on the
  Jensen-Shannon divergence (their loss, learning rates, 70/15/15 split and early stopping). Positional
  signal = w_pos, symbolic signal = the mean of gate_k[w] over the pairs, fitted ratio = their quotient.
  Their code fits the model but prints no ratio and neither paper defines one: this quotient is our reading.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from vlbind.core.schema import check_fields
from vlbind.core.settings import config_defaults, from_dict
from vlbind.interp.mechanisms import QWEN_LABELS, first_spike, peak
from vlbind.qwen.models import decoder_layers
from vlbind.qwen.prompts import Chat
from vlbind.qwen.words import BOX_OBJECTS

log = logging.getLogger(__name__)

LETTERS = tuple(chr(c) for c in range(ord("A"), ord("Z") + 1))
LABELS = QWEN_LABELS  # vlbind.interp.mechanisms: the vocabulary table1.csv and circuits.csv share
QUESTION = "Respond in one word, only the answer and nothing else: Which box is the {} in? Box"  # their SCHEMA_BOXES


@dataclass(frozen=True)
@config_defaults("qwen.binding")
class BindingConfig:
    n_entries: int  # boxes per prompt
    pairs: int  # interchange pairs per model
    filter_correct: bool  # false: pairs answered wrongly unpatched are kept
    system_turn: bool  # false: the user's turn only (a template may add its default system prompt: Qwen2's and
    # Qwen2.5's do); true: qwen.chat.system_prompt as in retrieval
    spike_fraction: float  # first spike (a column beside the peak): effect >= this x its maximum
    min_effect: float  # no peak (and no spike) when positional + symbolic never reach this share
    layers_per_batch: int  # patched last-token runs per forward (lower it if memory is short)
    seed: int

    def __post_init__(self) -> None:
        if not 3 <= self.n_entries <= min(len(BOX_OBJECTS), len(LETTERS)):
            raise ValueError(f"qwen.binding.n_entries={self.n_entries}: needs 3 (q, c and one more entry) to "
                             f"{min(len(BOX_OBJECTS), len(LETTERS))} (the objects in vlbind/qwen/words.py)")
        check_fields("qwen.binding", self)  # types and ranges: the schema's

    @classmethod
    def from_dict(cls, d: dict) -> BindingConfig:
        return from_dict(cls, d)


@dataclass(frozen=True)
class BoxesPair:
    original: str
    counterfactual: str
    letters: tuple[str, ...]  # the original's letters, entry order
    entries: dict  # q, c, s, w: entry indices
    predictions: dict  # label -> letter, for positional, symbolic, reflexive, no_effect


def listed(clauses: list[str]) -> str:
    """Their _format_list: "a", "a and b", "a, b, and c"."""
    if len(clauses) < 3:
        return " and ".join(clauses)
    return ", ".join(clauses[:-1]) + f", and {clauses[-1]}"


def boxes_text(objects, letters, query: str) -> str:
    """Their raw_input: the capitalised context, the question, " Answer:"."""
    context = listed([f"the {o} is in Box {b}" for o, b in zip(objects, letters)])
    return f"{context[0].upper()}{context[1:]}. {QUESTION.format(query)} Answer:"


def make_pairs(n_entries: int, count: int, seed: int) -> list[BoxesPair]:
    """`count` pairs of `n_entries` boxes, drawn from `seed` as their split_key_loc template draws them."""
    rng, out = np.random.default_rng(seed), []
    for _ in range(count):
        objects = [BOX_OBJECTS[i] for i in rng.permutation(len(BOX_OBJECTS))[:n_entries]]
        letters = [LETTERS[i] for i in rng.permutation(len(LETTERS))[:n_entries]]
        q = int(rng.integers(n_entries))
        c = int(rng.choice([i for i in range(n_entries) if i != q]))
        s = int(rng.choice([i for i in range(n_entries) if i not in (q, c)]))
        w = int(rng.choice([i for i in range(n_entries) if i not in (q, c)]))
        cf_letters, cf_objects = list(letters), list(objects)
        cf_letters[c], cf_letters[s] = letters[s], letters[c]
        cf_objects[c], cf_objects[w] = objects[w], objects[c]
        predictions = {"positional": letters[c], "symbolic": letters[w], "reflexive": letters[s],
                       "no_effect": letters[q]}
        out.append(BoxesPair(boxes_text(objects, letters, objects[q]), boxes_text(cf_objects, cf_letters, objects[w]),
                             tuple(letters), {"q": q, "c": c, "s": s, "w": w}, predictions))
    return out


def their_chat(chat: Chat, cfg: BindingConfig) -> Chat:
    """The chat Gur-Arieh et al.'s format_prompt renders: the user's turn (with qwen.chat's system prompt only if
    `system_turn`) and no thinking flag (the template's default)."""
    return dataclasses.replace(chat, system_prompt=chat.system_prompt if cfg.system_turn else None, thinking=None)


def label_of(letter: str, predictions: dict) -> str:
    return next((k for k, v in predictions.items() if v == letter), "mixed")


def chat_ids(tokenizer, text: str, chat: Chat) -> torch.Tensor:
    """(1, T) ids of the chat with `text` as the user's turn, ending where the assistant's reply begins."""
    return tokenizer(chat.render(tokenizer, text), return_tensors="pt", add_special_tokens=False)["input_ids"]


def letter_ids(tokenizer, letters) -> list[int]:
    return [tokenizer.encode(" " + b, add_special_tokens=False)[-1] for b in letters]


def last_stream(model, ids: torch.Tensor) -> torch.Tensor:
    """(L, d): the last token's residual stream entering each decoder layer."""
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    return torch.stack([h[0, -1] for h in hidden[:len(decoder_layers(model))]])


def patched_last_logits(model, ids: torch.Tensor, layers: list[int | None], values: torch.Tensor) -> torch.Tensor:
    """(len(layers), V): the last token's logits of `ids` (1, T), one row per entry of `layers`: None runs
    unpatched, L replaces the last token's stream entering decoder layer L by values[L]. The prefix ids[:, :-1]
    runs once; its key/value cache is shared by the batch of last-token runs."""
    blocks = decoder_layers(model)
    rows = {L: [j for j, x in enumerate(layers) if x == L] for L in set(layers) - {None}}

    def hook(index):
        def fn(module, args, kwargs):
            if index not in rows:
                return None
            x = (args[0] if args else kwargs["hidden_states"]).clone()
            x[rows[index], -1] = values[index].to(x.dtype)
            return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})
        return fn

    # transformers >= 5.2x names the key/value cache `cache`, earlier versions `past_key_values`
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        cache = getattr(model(input_ids=ids[:, :-1], use_cache=True), name)
        cache.batch_repeat_interleave(len(layers))
        handles = [m.register_forward_pre_hook(hook(i), with_kwargs=True) for i, m in enumerate(blocks)]
        try:
            return model(input_ids=ids[:, -1:].expand(len(layers), 1), **{name: cache}).logits[:, -1]
        finally:
            for h in handles:
                h.remove()


def full_forward_patched(model, ids: torch.Tensor, layer: int, value: torch.Tensor) -> torch.Tensor:
    """(V,): the last token's logits of one plain forward of `ids` (1, T) with the last token's stream entering
    decoder layer `layer` set to `value`: the plain method patched_last_logits equals (tests, benchmarks/)."""
    def fn(module, args, kwargs):
        x = (args[0] if args else kwargs["hidden_states"]).clone()
        x[:, -1] = value
        return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

    handle = decoder_layers(model)[layer].register_forward_pre_hook(fn, with_kwargs=True)
    try:
        with torch.no_grad():
            return model(input_ids=ids).logits[0, -1]
    finally:
        handle.remove()


def interchange(model, tokenizer, pairs: list[BoxesPair], chat: Chat, *,
                filter_correct: bool = BindingConfig.filter_correct,
                layers_per_batch: int = BindingConfig.layers_per_batch, device: str = "cpu") -> pd.DataFrame:
    """One row per (pair, layer): the pair's entries q, c, s, w, whether the unpatched answer is right, the
    patched label, the patched logits over the entries (entry order) and the patched token (the prompt's last).
    With `filter_correct`, pairs answered wrongly unpatched are left out; `attrs['dropped']` counts them."""
    rows, dropped, t0 = [], 0, time.time()
    n_layers = len(decoder_layers(model))
    for k, pair in enumerate(pairs):
        ids = chat_ids(tokenizer, pair.original, chat).to(device)
        cf = last_stream(model, chat_ids(tokenizer, pair.counterfactual, chat).to(device))
        candidates = letter_ids(tokenizer, pair.letters)
        sweep: list[int | None] = [None, *range(n_layers)]
        logits = torch.cat([patched_last_logits(model, ids, sweep[i:i + layers_per_batch], cf)
                            for i in range(0, len(sweep), layers_per_batch)])[:, candidates].float().cpu()
        correct = pair.letters[int(logits[0].argmax())] == pair.predictions["no_effect"]
        if filter_correct and not correct:
            dropped += 1
            continue
        for layer, row in enumerate(logits[1:]):
            letter = pair.letters[int(row.argmax())]
            rows.append({"pair": k, **pair.entries, "correct_unpatched": correct, "layer": layer,
                         "label": label_of(letter, pair.predictions), "logits": row.tolist(),
                         "patched_token": tokenizer.convert_ids_to_tokens(int(ids[0, -1]))})
        if (k + 1) % 50 == 0 or k + 1 == len(pairs):
            rate = (k + 1) / max(time.time() - t0, 1e-9)
            log.info("%d/%d pairs, %.2f pairs/s, ETA %.0f s", k + 1, len(pairs), rate, (len(pairs) - k - 1) / rate)
    table = pd.DataFrame(rows, columns=["pair", "q", "c", "s", "w", "correct_unpatched", "layer", "label", "logits",
                                        "patched_token"])
    table.attrs["dropped"] = dropped
    return table


def shares(table: pd.DataFrame) -> pd.DataFrame:
    """Share of each label per layer (rows: layers, columns: LABELS)."""
    return pd.crosstab(table["layer"], table["label"], normalize="index").reindex(columns=LABELS, fill_value=0.0)


def fit_mechanisms(table: pd.DataFrame, n_entries: int, seed: int = 0, epochs: int = 5000,
                   patience: int = 500) -> dict:
    """Gur-Arieh et al.'s minimal model (module docstring) fitted to rows of one layer: w_pos, the mean lexical
    and reflexive gates over the rows, the held-out Jensen-Shannon divergence (bits) and the fitted ratio."""
    g = torch.Generator().manual_seed(seed)
    p, k, i = (torch.tensor(table[col].to_numpy(), dtype=torch.long) for col in ("c", "w", "s"))
    target = torch.softmax(torch.as_tensor(np.stack(table["logits"].to_numpy()), dtype=torch.float32), -1)
    a = torch.arange(n_entries)
    w_pos, coeffs = torch.tensor(1.0, requires_grad=True), torch.tensor([0.0, 0.0, 3.0], requires_grad=True)
    gate_k, gate_i = torch.zeros(n_entries, requires_grad=True), torch.zeros(n_entries, requires_grad=True)
    params = [w_pos, coeffs, gate_k, gate_i]

    def logits(rows):
        pn = p[rows].float() / n_entries
        sigma = (coeffs[0] * pn ** 2 + coeffs[1] * pn + coeffs[2])[:, None] + 1e-6
        gauss = torch.exp(-((a[None] - p[rows, None]) ** 2) / (2 * sigma ** 2))
        return (w_pos * gauss + gate_k[k[rows], None] * (a[None] == k[rows, None])
                + gate_i[i[rows], None] * (a[None] == i[rows, None]))

    def js(rows):
        P, Q = torch.softmax(logits(rows), -1).clamp_min(1e-12), target[rows].clamp_min(1e-12)
        M = (P + Q) / 2
        return 0.5 * ((P * (P / M).log2()).sum(-1) + (Q * (Q / M).log2()).sum(-1))

    n = len(table)
    perm = torch.randperm(n, generator=g)
    train, val, test = perm[:int(0.7 * n)], perm[int(0.7 * n):int(0.85 * n)], perm[int(0.85 * n):]
    if len(val) == 0 or len(test) == 0:
        train = val = test = perm
    opt = torch.optim.Adam(params, lr=5e-2)
    best, best_state, bad = float("inf"), None, 0
    for _ in range(epochs):
        loss = js(train).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            v = js(val).mean().item()
        if v < best - 1e-6:
            best, best_state, bad = v, [t.detach().clone() for t in params], 0
        else:
            bad += 1
            if bad >= patience:
                break
    with torch.no_grad():
        for t, b in zip(params, best_state or params):
            t.copy_(b)
        lexical, reflexive = gate_k[k].mean().item(), gate_i[i].mean().item()
        return {"w_pos": w_pos.item(), "lexical_gate": lexical, "reflexive_gate": reflexive,
                "fit_js": js(test).mean().item(),
                "ratio_fit": lexical / w_pos.item() if w_pos.item() != 0 else float("nan")}


def summarize(table: pd.DataFrame, n_entries: int, spike_fraction: float = BindingConfig.spike_fraction,
              min_effect: float = BindingConfig.min_effect, fit: bool = True) -> dict:
    """Peak layer (highest positional + symbolic share), the label shares there, the share ratio and (with
    `fit`) the fitted ratio, and the first-spike layer beside them; NaN where no pair was kept or no layer
    reaches min_effect."""
    empty = {"peak_layer": None, "first_spike_layer": None, "ratio_share": float("nan"),
             "ratio_fit": float("nan"), **{f"share_{k}": float("nan") for k in LABELS}}
    if table.empty:
        return empty
    s = shares(table)
    effect = s["positional"] + s["symbolic"]
    at_peak = peak(effect, min_effect)
    if at_peak is None:
        return empty
    at = s.loc[at_peak]
    spike = first_spike(effect, spike_fraction, relative=True, min_effect=min_effect)  # appendix F, relative
    out = {"peak_layer": at_peak, "first_spike_layer": spike,
           "ratio_share": float(at["symbolic"] / at["positional"]) if at["positional"] > 0 else float("inf"),
           **{f"share_{k}": float(at[k]) for k in LABELS}}
    if fit:
        out.update(fit_mechanisms(table[table["layer"] == at_peak], n_entries))
    return {**empty, **out}


DEFINITIONS = {
    "peak_layer": "layer of the highest share positional + share symbolic (section 5.6; qwen.binding.min_effect)",
    "first_spike_layer": "first spike of share positional + share symbolic (appendix F; qwen.binding.spike_fraction)",
    "ratio_share": "share symbolic / share positional at the peak layer",
    "ratio_fit": "mean lexical gate / w_pos of Gur-Arieh et al.'s minimal model fitted at the peak layer",
}


def table1(df: pd.DataFrame, cfg: BindingConfig) -> pd.DataFrame:
    """Table 1 from the interchange rows of every model (columns model, generation, kind, dropped and those of
    `interchange`): per model the peak layer, the shares there, both ratios, and for each VLM each ratio minus
    its generation's LLM's."""
    rows = []
    for (model, generation, kind), t in df.groupby(["model", "generation", "kind"], sort=False):
        pairs = t.drop_duplicates("pair")
        rows.append({"model": model, "generation": generation, "kind": kind,
                     **summarize(t, cfg.n_entries, cfg.spike_fraction, cfg.min_effect),
                     "pairs": len(pairs), "correct_unpatched": float(pairs["correct_unpatched"].mean()),
                     "patched_token": ", ".join(map(repr, pairs["patched_token"].unique()))
                     if "patched_token" in pairs else "",
                     "pairs_dropped": int(t["dropped"].iloc[0])})
    out = pd.DataFrame(rows)
    for ratio in ("ratio_share", "ratio_fit"):
        llm = out[out["kind"] == "llm"].groupby("generation")[ratio].first()
        out[f"vlm_minus_llm_{ratio[6:]}"] = [
            r[ratio] - llm[r.generation] if r.kind == "vlm" and r.generation in llm else float("nan")
            for _, r in out.iterrows()]
    for column, text in DEFINITIONS.items():
        out[f"{column}_definition"] = text
    return out
