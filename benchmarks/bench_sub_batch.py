"""What `train.sub_batch_tokens` buys: prompts/s of the real training loop (train.train_attempt) with the batch
whole and run sorted by length as sub-batches of at most N positions (batching.by_length), on mini's model and
text_s4's task (216 colors and shapes, shuffled lists, solo practice 0.5 (--solo), every object queried), for the
ramp's lengths 2..n.

    python benchmarks/bench_sub_batch.py [--batch-size 256] [--tokens 0 512 1024 2048] [--lengths 2 3 5 8]
                                         [--solo 0.5] [--steps 20] [--threads 1] [--device cpu] [--profile]

0 in --tokens: the batch whole. Precision as the configs' auto (bf16 where the device computes it natively).
A packed batch pads every prompt to its longest; with solo practice half the prompts are short, so the padding
grows with the length range. `--profile`: where a step's time goes instead (torch.profiler, the loop's own step
on 2..max(--lengths) with the first of --tokens): each operator's share of the time, and the matrix products'
FLOPs and rate, to set against the core's peak. Results: docs/results/benchmarks-train-loop.md.
"""
import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from vlbind.core.device import precision_for
from vlbind.data.batching import by_length
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import Role, generate, pack_queries
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.config import TrainConfig
from vlbind.training.loop import _step, train_attempt
from vlbind.training.optim import make_optimizer

MINI = ModelConfig(n_layers=6, d_model=64, d_ff=256, n_heads=4)


def rate(n: int, solo: float, train: TrainConfig, device: str) -> float:
    """Prompts/s of `train.max_steps` steps of the loop on 2..n objects (a 3-step run first, untimed)."""
    spec = StageSpec(216, 216, 8, 2, n, shuffle=True, solo_fraction=solo, symmetric_fraction=0.0)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        warm = TrainConfig(**{**train.__dict__, "max_steps": 3, "eval_every": 3})
        train_attempt(Transformer(MINI), spec, warm, Path(d) / "warm", stage="bench", device=device)
        t0 = time.perf_counter()
        train_attempt(Transformer(MINI), spec, train, Path(d) / "run", stage="bench", device=device)
        return train.max_steps * train.batch_size / (time.perf_counter() - t0)


def profile_step(n: int, solo: float, train: TrainConfig, device: str) -> None:
    """Print where `train.max_steps` training steps on 2..n objects spend their time (3 steps first, unprofiled)."""
    spec = StageSpec(216, 216, 8, 2, n, shuffle=True, solo_fraction=solo, symmetric_fraction=0.0)
    torch.manual_seed(0)
    model = Transformer(MINI).to(device).train()
    opt = make_optimizer(model, train)
    rng = np.random.default_rng(0)
    batches = [pack_queries(generate(spec, train.batch_size, rng)) for _ in range(3 + train.max_steps)]
    for i, batch in enumerate(batches[:3]):
        _step(model, model, opt, batch, train, i, device, None)
    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        t0 = time.perf_counter()
        for i, batch in enumerate(batches[3:], start=3):
            _step(model, model, opt, batch, train, i, device, None)
        step_ms = 1000 * (time.perf_counter() - t0) / train.max_steps
    ops = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in ops)
    parts = [p for b in batches[3:] for p in (by_length(b, train.sub_batch_tokens) if train.sub_batch_tokens else [b])]
    print(f"2..{n}, sub_batch_tokens {train.sub_batch_tokens}: {step_ms:.0f} ms a step (profiled); a step computes "
          f"{sum(p.tokens.size for p in parts) / train.max_steps:.0f} positions, of them tokens "
          f"{sum(int((p.roles != Role.PAD).sum()) for p in parts) / train.max_steps:.0f} (the batch whole: "
          f"{sum(b.tokens.size for b in batches[3:]) / train.max_steps:.0f} positions)")
    for e in ops[:12]:
        gflop, seconds = e.flops / 1e9, e.self_cpu_time_total / 1e6
        flops = f", {gflop / train.max_steps:.2f} GFLOP a step at {gflop / seconds:.0f} GFLOP/s" if e.flops else ""
        print(f"  {e.key[:48]:<48} {100 * e.self_cpu_time_total / total:5.1f} %{flops}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--tokens", type=int, nargs="+", default=[0, 512, 1024, 2048])
    ap.add_argument("--lengths", type=int, nargs="+", default=[2, 3, 5, 8])
    ap.add_argument("--solo", type=float, default=0.5)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="where a step's time goes (module doc)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    precision = precision_for({"cpu": "auto", "cuda": "bf16"}, args.device)
    base = TrainConfig(batch_size=args.batch_size, queries="all", precision=precision, max_steps=args.steps,
                       eval_every=args.steps, val_size=32, checkpoint_every=10 * args.steps, warmup_steps=10)
    if args.profile:
        tokens = args.tokens[0] or None
        return profile_step(max(args.lengths), args.solo, replace(base, sub_batch_tokens=tokens), args.device)
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {args.threads} thread(s)"
    print(f"device {where}, {precision}, batch {args.batch_size}, solo {args.solo}, {args.steps} steps; prompts/s")
    print(f"{'objects':<8}" + "".join(f"{f'{s} tok' if s else 'whole':>12}" for s in args.tokens))
    for n in args.lengths:
        rates = [rate(n, args.solo, TrainConfig(**{**base.__dict__, "sub_batch_tokens": s or None}), args.device)
                 for s in args.tokens]
        print(f"2..{n:<5}" + "".join(f"{r:>12.0f}" for r in rates), flush=True)


if __name__ == "__main__":
    main()
