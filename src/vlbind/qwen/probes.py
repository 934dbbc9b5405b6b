"""Linear probes on pretrained models (paper, section G.6 and appendix H; Fig 14, Fig 15): is an object's color
decodable at its shape token, in the context (where symbolic binding binds it) and in the association list
(where it propagates)? The paper does not give its Qwen prompt; ours is the colored-shapes indirect retrieval
task in words [assumption]:

    Context: the red one is a circle, the blue one is a star, the green one is a heart. Associations: star
    item4, heart item9, circle item2. Question: Which item goes with the blue shape? Answer:

given as the user's turn of the chat (qwen.chat). The color sits three words before its shape ("red one is a
circle"), not right before it: with "red circle", the color is the shape token's previous token, which any
model's early layers carry, and Fig 14 could not show a gap between models. Here reading the color at the
shape token takes a binding step across the words between them.

The residual stream entering each decoder layer is read (`output_hidden_states`) at the shape word's last
sub-token. The probe is a ridge classifier (least squares onto one-hot colors on standardised features, the
scratch models' probe, vlbind.interp.probes.fit_and_score), solved in its dual form because a 7B model has
more dimensions than there are training rows; its penalty is chosen per role and layer from `ridges` by
`folds`-fold cross-validation on the training prompts (folds split by prompt), refitted on all of them, and
scored on held-out prompts, with its chance (the most frequent training color).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from vlbind.core.settings import config_defaults, from_dict
from vlbind.interp.ridge import ridge_inputs
from vlbind.qwen.models import decoder_layers
from vlbind.qwen.prompts import Chat
from vlbind.qwen.words import COLOR_WORDS, ITEM_WORDS, SHAPE_WORDS

ROLES = ("context shape", "association shape")


@dataclass(frozen=True)
@config_defaults("qwen.probes")
class QwenProbeConfig:
    train_prompts: int
    test_prompts: int
    n_objects: int  # objects per prompt
    ridges: tuple[float, ...]  # penalties tried
    folds: int  # cross-validation folds over the training prompts
    seed: int

    def __post_init__(self) -> None:
        if not self.ridges or min(self.ridges) <= 0:
            raise ValueError(f"qwen.probes.ridges={list(self.ridges)}: give one or more penalties > 0")
        if not 2 <= self.folds <= self.train_prompts:
            raise ValueError(f"qwen.probes.folds={self.folds} must lie in 2..train_prompts ({self.train_prompts})")

    @classmethod
    def from_dict(cls, d: dict) -> QwenProbeConfig:
        d = dict(d)
        if "ridges" in d:
            d["ridges"] = tuple(float(r) for r in d["ridges"])
        return from_dict(cls, d)


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
        text += f"the {COLOR_WORDS[colors[j]]} one is a "
        context[j] = (len(text), len(text) + len(SHAPE_WORDS[shapes[j]]))
        text += SHAPE_WORDS[shapes[j]] + (", " if j < n_objects - 1 else ". Associations: ")
    for k, j in enumerate(order):
        association[j] = (len(text), len(text) + len(SHAPE_WORDS[shapes[j]]))
        text += f"{SHAPE_WORDS[shapes[j]]} {ITEM_WORDS[items[j]]}" + (", " if k < n_objects - 1 else ". ")
    query = COLOR_WORDS[colors[rng.integers(n_objects)]]
    text += f"Question: Which item goes with the {query} shape? Answer:"
    spans = {"context shape": context, "association shape": association}
    return ProbePrompt(text, tuple(int(c) for c in colors), spans)


def token_positions(tokenizer, prompt: ProbePrompt, chat: Chat) -> tuple[torch.Tensor, dict]:
    """(ids (1, T), role -> token index of each object's shape word, its last sub-token)."""
    rendered = chat.render(tokenizer, prompt.text)
    base = rendered.index(prompt.text)
    enc = tokenizer(rendered, return_offsets_mapping=True, add_special_tokens=False, return_tensors="pt")
    offsets = enc["offset_mapping"][0].tolist()

    def last_token(end: int) -> int:
        return next(i for i, (a, b) in enumerate(offsets) if a < base + end <= b)

    return enc["input_ids"], {role: [last_token(e) for _, e in spans] for role, spans in prompt.spans.items()}


@torch.no_grad()
def collect(model, tokenizer, prompts: list[ProbePrompt], chat: Chat, device: str = "cpu"):
    """role -> (features (L, N, d) entering each decoder layer, color labels (N,), prompt index (N,))."""
    n_layers = len(decoder_layers(model))
    feats, labels, groups = ({r: [] for r in ROLES} for _ in range(3))
    for k, p in enumerate(prompts):
        ids, positions = token_positions(tokenizer, p, chat)
        hidden = model(input_ids=ids.to(device), output_hidden_states=True).hidden_states[:n_layers]
        stack = torch.stack([h[0] for h in hidden]).float().cpu().numpy()  # (L, T, d)
        for role in ROLES:
            feats[role].append(stack[:, positions[role]])
            labels[role].append(np.array(p.colors))
            groups[role].append(np.full(len(p.colors), k))
    return {r: (np.concatenate(feats[r], axis=1), np.concatenate(labels[r]), np.concatenate(groups[r])) for r in ROLES}


def ridge_accuracy(x_train, y_train, x_test, y_test, ridges, device: str = "cpu") -> tuple[np.ndarray, float]:
    """(held-out accuracy (len(ridges), L) of ridge classifiers fitted per layer on x_train (L, N, d), chance):
    the dual solution X^T (X X^T + a I)^-1 Y of interp.probes.fit_and_score's primal one, on the same inputs
    (interp.ridge.ridge_inputs, float64); one eigendecomposition serves every penalty. Computed on `device`
    (the job's GPU, where it has one): the Gram matrices and their eigendecompositions are the cost,
    ~L (2 N^2 d + 9 N^3) flops (benchmarks/bench_qwen_probes.py)."""
    xt, onehot, xe, y_te, chance = (t.to(device) if torch.is_tensor(t) else t
                                    for t in ridge_inputs(x_train, y_train, x_test, y_test))
    eig, vec = torch.linalg.eigh(xt @ xt.transpose(1, 2))  # (L, N), (L, N, N)
    proj, cross = vec.transpose(1, 2) @ onehot, xe @ xt.transpose(1, 2)  # (L, N, C), (L, M, N)
    out = []
    for a in ridges:
        coef = vec @ (proj / (eig.clamp_min(0) + a)[..., None])
        out.append(((cross @ coef).argmax(-1).cpu().numpy() == y_te[None]).mean(1))
    return np.stack(out), chance


def choose_ridge(x, y, groups, ridges, folds: int, device: str = "cpu") -> np.ndarray:
    """Per layer, the penalty of `ridges` with the best mean accuracy over `folds` folds of the rows split by
    `groups` (the larger penalty on a tie)."""
    unique = np.unique(groups)
    fold_of = dict(zip(unique, np.arange(len(unique)) % folds))
    fold = np.array([fold_of[g] for g in groups])
    acc = np.mean([ridge_accuracy(x[:, fold != f], y[fold != f], x[:, fold == f], y[fold == f], ridges, device)[0]
                   for f in range(folds)], axis=0)  # (len(ridges), L)
    best = acc.shape[0] - 1 - np.argmax(acc[::-1], axis=0)
    return np.asarray(ridges)[best]


def probe_table(model, tokenizer, cfg: QwenProbeConfig, chat: Chat, device: str = "cpu") -> pd.DataFrame:
    """Tidy rows: role, layer, accuracy, chance, ridge (color decoded at the shape token); the model runs and the
    probes are fitted on `device`."""
    rng = np.random.default_rng(cfg.seed)
    train, test = (collect(model, tokenizer, [make_prompt(rng, cfg.n_objects) for _ in range(n)], chat, device)
                   for n in (cfg.train_prompts, cfg.test_prompts))
    rows = []
    for role in ROLES:
        (x, y, groups), (xe, ye, _) = train[role], test[role]
        chosen = choose_ridge(x, y, groups, cfg.ridges, cfg.folds, device)
        acc, chance = ridge_accuracy(x, y, xe, ye, cfg.ridges, device)  # every penalty and layer: one eigh per layer
        for layer, ridge in enumerate(chosen):
            rows.append({"role": role, "layer": layer, "accuracy": float(acc[cfg.ridges.index(ridge), layer]),
                         "chance": chance, "ridge": float(ridge)})
    return pd.DataFrame(rows)
