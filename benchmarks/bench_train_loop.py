"""Does the training loop keep the model busy? Steps/s of the real loop (train.train_attempt: prompt generation,
packing, the step, the bookkeeping) against the model alone on one fixed batch (forward + backward + clipping +
optimizer), for the paper's model, mini's, and one so small that its step costs about what a GPU step does.

    python benchmarks/bench_train_loop.py [--device cuda] [--threads 1] [--steps 300] [--queries one] [--compile]

Batch 32, every object queried (`train.queries: all`, the configs' setting; `--queries one`: the paper's one
query per prompt), 2..8 objects of text_s3's task, bf16 autocast where the device computes it natively. One
validation of 32 prompts at the end is included in the loop's time. (A background thread drawing batches ahead
was measured here, gained nothing on a CPU or an H100 and is gone: docs/results/benchmarks-train-loop.md.) Runs
unchanged on CUDA. `--compile` adds the model alone with its forward compiled by `torch.compile`, in the default
mode and in "reduce-overhead" (CUDA graphs), and the loop with `train.compile` (train.compiled: reduce-overhead on
CUDA, default elsewhere), each compilation excluded (a run of 10 steps, 300 compiled, before the timed one
compiles); a mode that fails prints its error.
"""
import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from vlbind.core.device import precision_for
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import generate, pack_queries
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.config import TrainConfig
from vlbind.training.loop import train_attempt
from vlbind.training.losses import training_loss
from vlbind.training.optim import make_optimizer

MODELS = {"paper 12 x 128": ModelConfig(n_layers=12, d_model=128, d_ff=512, n_heads=4),
          "mini 6 x 64": ModelConfig(n_layers=6, d_model=64, d_ff=256, n_heads=4),
          "tiny 1 x 16": ModelConfig(n_layers=1, d_model=16, d_ff=64, n_heads=4)}
SPEC = StageSpec(n_colors=216, n_shapes=216, n_items=8, min_objects=2, max_objects=8, shuffle=False,
                 symmetric_fraction=0.0)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def model_only(cfg: ModelConfig, train: TrainConfig, device: str, steps: int, mode: str | None = None) -> float:
    torch.manual_seed(0)
    model = Transformer(cfg).to(device).train()
    net = model if mode is None else torch.compile(model, mode=mode)
    opt = make_optimizer(model, train)
    batch = generate(SPEC, train.batch_size, np.random.default_rng(0))
    batch = pack_queries(batch) if train.queries == "all" else batch

    def step():
        loss = training_loss(net, batch, train, device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        opt.step()

    for _ in range(10):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return steps / (time.perf_counter() - t0)


def loop(cfg: ModelConfig, train: TrainConfig, device: str) -> float:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        n = 300 if train.compile else 10  # compiled: long enough to meet the batch shapes and recompile for them
        warm = TrainConfig(**{**train.__dict__, "max_steps": n, "eval_every": n})
        train_attempt(Transformer(cfg), SPEC, warm, Path(d) / "warm", stage="bench", device=device)
        t0 = time.perf_counter()
        train_attempt(Transformer(cfg), SPEC, train, Path(d) / "run", stage="bench", device=device)
        sync(device)
        return train.max_steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--queries", choices=["all", "one"], default="all")
    ap.add_argument("--compile", action="store_true", help="add the model alone, compiled (see the module doc)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    precision = precision_for({"cpu": "auto", "cuda": "bf16"}, args.device)
    train = TrainConfig(batch_size=32, queries=args.queries, precision=precision, max_steps=args.steps,
                        eval_every=args.steps, val_size=32, checkpoint_every=10 * args.steps, warmup_steps=10)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu, {args.threads} thread(s)"
    print(f"device {name}, {precision}, batch 32, queries {args.queries}, {args.steps} steps")
    print(f"{'model':<16} {'model alone':>12} {'loop':>12} {'loop / alone':>14}")
    eager, eager_loop = {}, {}
    for key in args.models:
        cfg = MODELS[key]
        alone = model_only(cfg, train, args.device, args.steps)
        inline = loop(cfg, train, args.device)
        print(f"{key:<16} {alone:>12.1f} {inline:>12.1f} {inline / alone:>14.2f}", flush=True)
        eager[key], eager_loop[key] = alone, inline
    for key, mode in [(k, m) for k in args.models for m in ("default", "reduce-overhead")] if args.compile else []:
        try:
            rate = model_only(MODELS[key], train, args.device, args.steps, mode)
            print(f"{key}, model alone compiled ({mode}): {rate:.1f} steps/s, {rate / eager[key]:.2f} x eager",
                  flush=True)
        except Exception as e:  # report and go on: the eager numbers stand
            print(f"{key}, compiled ({mode}) failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    for key in args.models if args.compile else []:
        torch._dynamo.reset()  # forget the compilations above
        try:
            rate = loop(MODELS[key], TrainConfig(**{**train.__dict__, "compile": True}), args.device)
            print(f"{key}, loop with train.compile: {rate:.1f} steps/s, {rate / eager_loop[key]:.2f} x the eager loop",
                  flush=True)
        except Exception as e:
            print(f"{key}, loop with train.compile failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
