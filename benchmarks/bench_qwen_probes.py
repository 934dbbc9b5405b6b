"""What the Qwen probe fit costs (vlbind.qwen.probes: per role, the cross-validated penalty choice and the final
fit, in float64), measured at small sizes on random features and scaled to a real model.

    python benchmarks/bench_qwen_probes.py [--device cuda] [--threads 1]

The work is the Gram matrices X X^T (2 N^2 d flops per layer) and their eigendecompositions (~9 N^3 per layer),
once on all N training rows and once per fold on (1 - 1/folds) N; the script times sizes that separate the two
terms, fits seconds = a * gram_flops + b * eigh_flops by least squares, and prints the estimate for the paper's
Qwen settings (qwen.probes: 256 training prompts x 6 objects = 1,536 rows, 5 folds, 2 roles) at each model's
width and depth. The estimate holds for the device and threads it ran with.
"""
import argparse
import time

import numpy as np
import torch

from vlbind.qwen.probes import QwenProbeConfig, choose_ridge, ridge_accuracy

MODELS = {"Qwen2-7B / Qwen2.5-7B (28 x 3584)": (28, 3584), "Qwen3-8B (36 x 4096)": (36, 4096),
          "Qwen2-VL / Qwen2.5-VL (28 x 3584)": (28, 3584), "Qwen3-VL-8B (36 x 4096)": (36, 4096)}


def flops(layers: int, rows: int, dim: int, folds: int) -> tuple[float, float]:
    """(Gram flops, eigendecomposition flops) of one role's fit: all rows once, then each fold's training rows."""
    sizes = [rows] + [rows * (folds - 1) / folds] * folds
    return sum(2 * n * n * dim for n in sizes) * layers, sum(9 * n ** 3 for n in sizes) * layers


def time_fit(layers: int, prompts: int, dim: int, cfg: QwenProbeConfig, device: str) -> float:
    rng = np.random.default_rng(0)
    n = prompts * cfg.n_objects
    x, xe = rng.normal(size=(layers, n, dim)), rng.normal(size=(layers, n // 2, dim))
    y, ye = rng.integers(0, 10, n), rng.integers(0, 10, n // 2)
    groups = np.repeat(np.arange(prompts), cfg.n_objects)
    t0 = time.perf_counter()
    choose_ridge(x, y, groups, cfg.ridges, cfg.folds, device)
    ridge_accuracy(x, y, xe, ye, cfg.ridges, device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = QwenProbeConfig()
    time_fit(1, 32, 64, cfg, args.device)  # warm-up
    sizes = [(2, 48, 256), (2, 48, 1024), (2, 96, 256), (2, 96, 1024), (2, 128, 512), (2, 64, 2048)]
    rows = []
    print(f"{'layers':>6} {'rows':>5} {'dim':>5} {'seconds':>8}  (one role, {cfg.folds} folds, "
          f"{len(cfg.ridges)} penalties, {args.device}, {args.threads} thread(s))")
    for layers, prompts, dim in sizes:
        s = time_fit(layers, prompts, dim, cfg, args.device)
        rows.append((*flops(layers, prompts * cfg.n_objects, dim, cfg.folds), s))
        print(f"{layers:>6} {prompts * cfg.n_objects:>5} {dim:>5} {s:>8.2f}")
    A = np.array([[g, e] for g, e, _ in rows])
    coef, *_ = np.linalg.lstsq(A, np.array([s for *_, s in rows]), rcond=None)
    fitted = A @ coef
    print(f"fit: seconds = {coef[0] * 1e9:.3f} s/GFLOP x Gram + {coef[1] * 1e9:.3f} s/GFLOP x eigh "
          f"(largest relative error {np.max(np.abs(fitted / [s for *_, s in rows] - 1)):.0%})")
    n = cfg.train_prompts * cfg.n_objects
    print(f"estimate at the paper's settings ({n} training rows, {cfg.folds} folds, 2 roles):")
    for name, (layers, dim) in MODELS.items():
        gram, eigh = flops(layers, n, dim, cfg.folds)
        print(f"  {name}: {2 * (coef[0] * gram + coef[1] * eigh) / 60:.1f} min")


if __name__ == "__main__":
    main()
