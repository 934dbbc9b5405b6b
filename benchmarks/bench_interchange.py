"""The full per-layer interchange sweep for one model: ours (all layers and examples in one stacked forward
pass through the hook API) vs the same sweep done layer by layer with nnsight (a pip-installable peer:
`pip install -e '.[bench]'`), on the same model and prompt pairs. Prints labels agreement and timings;
asserts nothing.

    python benchmarks/bench_interchange.py [--model results/models/seed0/text_s5] [--pairs 256] [--threads 1]

Without --model it uses a Table 2 model with random weights. Labels are compared on every pair (the
analysis itself drops pairs the model gets wrong; the timing question does not depend on that).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from vlbind.interp.interchange import (
    LABELS,
    item_argmax,
    label_predictions,
    make_pairs,
    patched_answer_logits,
    query_answer_residuals,
)
from vlbind.model.checkpoint import load_model
from vlbind.model.transformer import ModelConfig, Transformer


def ours(model, pairs, layers):  # patched at [ANSWER], as the nnsight sweep below
    values = query_answer_residuals(model, pairs.counterfactual, layers)
    predicted = item_argmax(patched_answer_logits(model, pairs.original, layers, values)[0], pairs.original)
    return label_predictions(predicted, pairs.predictions[None])


@torch.no_grad()
def with_nnsight(model, pairs, layers):
    from nnsight import NNsight

    nm = NNsight(model)
    o, cf = pairs.original, pairs.counterfactual
    rows = torch.arange(len(o))
    ans = torch.from_numpy(o.answer_pos)
    n = model.cfg.n_layers

    def point(layer):  # the residual stream entering `layer` (n: after the last block)
        return nm.blocks[layer].hook_resid_pre if layer < n else nm.blocks[n - 1].hook_resid_post

    saved = []
    with nm.trace(torch.from_numpy(cf.tokens), torch.from_numpy(cf.positions)):
        for layer in layers:
            saved.append(point(layer).output[rows, ans].save())
    labels = []
    for layer, value in zip(layers, saved):
        with nm.trace(torch.from_numpy(o.tokens), torch.from_numpy(o.positions)):
            point(layer).output[rows, ans] = value
            logits = nm.output[rows, ans].save()
        labels.append(label_predictions(item_argmax(logits, o), pairs.predictions))
    return np.stack(labels)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        model, _ = load_model(args.model)
    else:
        torch.manual_seed(0)
        model = Transformer(ModelConfig())
    model.eval()
    pairs = make_pairs(args.pairs, np.random.default_rng(0))
    layers = list(range(model.cfg.n_layers + 1))
    times = {"ours": [], "nnsight": []}
    results = {}
    for _ in range(args.repeats):  # alternate, keep the median
        for name, fn in (("ours", ours), ("nnsight", with_nnsight)):
            t = time.perf_counter()
            results[name] = fn(model, pairs, layers)
            times[name].append(time.perf_counter() - t)
    same = np.array_equal(results["ours"], results["nnsight"])
    t_ours, t_nn = np.median(times["ours"]), np.median(times["nnsight"])
    import nnsight
    print(f"model: {args.model or 'Table 2, random weights'} ({model.cfg.n_layers} layers, d {model.cfg.d_model}); "
          f"{args.pairs} pairs x {len(layers)} layers; threads={args.threads}; torch {torch.__version__}, "
          f"nnsight {nnsight.__version__}")
    print(f"| method | seconds per sweep (median of {args.repeats}) | speed-up |\n|---|---|---|")
    print(f"| vlbind (clean run cached once, [ANSWER] recomputed for all layers in one pass) | {t_ours:.3f} | "
          f"{t_nn / t_ours:.1f}x |")
    print(f"| nnsight, layer by layer | {t_nn:.3f} | 1.0x |")
    shares = np.stack([np.bincount(row, minlength=len(LABELS)) for row in results["ours"]]) / args.pairs
    print(f"labels identical on every (layer, pair): {same}; label shares at the last layer: "
          + ", ".join(f"{k} {v:.2f}" for k, v in zip(LABELS, shares[-1])))


if __name__ == "__main__":
    main()
