"""Speed of the text arm, measured side by side in one run. Prints a table; asserts nothing.

    python benchmarks/bench_text_arm.py [--threads 1] [--steps 30] [--skip-dag] [--bf16]

1. training step: our Transformer vs a Hugging Face LlamaForCausalLM of equal size (12 layers, d 128,
   4 heads, SwiGLU width 341 so that its MLP has the same parameter count as our 512-wide GELU MLP,
   1000-token vocabulary, untied embeddings), same batches, same answer-only loss, both unembedding only
   the [ANSWER] rows, fp32 and (on a CPU with native bf16, or with --bf16) bf16 autocast; Llama with both
   its "sdpa" and its "eager" attention (on a CPU bf16 SDPA is slow and eager is not), and ours against
   Llama's fastest setting as well;
2. noise_text vs text_only step cost (noise realised as RoPE position jumps);
3. prompt generation as a share of a training step;
4. `snakemake -n` on a complete tree (the smoke DAG, built once in a temporary directory);
5. with --profile: where each model's fp32 step spends its time (matrix multiplies vs everything else),
   which bounds how far ahead of an equal-size model with the same FLOPs ours can get;
6. dense supervision (train.queries: all) vs one query per prompt: labels trained per second at 2, 5 and
   8 objects, for the mini model (6 x 64) and Table 2's, at the training default precision.
Run it when nothing else runs: on a busy 2-core box timings are noise.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vlbind.core.device import autocast, precision_for
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import generate, pack_queries
from vlbind.model.inference import answer_logits
from vlbind.model.transformer import ModelConfig, Transformer, count_parameters
from vlbind.training.config import TrainConfig
from vlbind.training.losses import training_loss
from vlbind.training.optim import make_optimizer

ROOT = Path(__file__).resolve().parents[1]
TEXT_S5 = StageSpec(216, 216, 32, 2, 8, shuffle=True, symmetric_fraction=0.0)  # as measured (no symmetric prompts)
NOISE_TEXT = StageSpec(216, 216, 32, 2, 8, shuffle=True, noise_tokens=100, noise_fraction=1.0, symmetric_fraction=0.0)


def llama_like(cfg: ModelConfig, attention: str = "sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    hf = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=341,
                     num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                     num_key_value_heads=cfg.n_heads, max_position_embeddings=cfg.max_positions,
                     rope_theta=cfg.rope_base, tie_word_embeddings=False, attention_dropout=0.0,
                     attn_implementation=attention)
    return LlamaForCausalLM(hf)


def hf_answer_logits(model, batch, precision):
    tokens, positions = torch.from_numpy(batch.tokens), torch.from_numpy(batch.positions)
    with autocast("cpu", precision):
        hidden = model.model(input_ids=tokens, position_ids=positions, use_cache=False).last_hidden_state
        rows = torch.arange(len(batch))
        return model.lm_head(hidden[rows, torch.from_numpy(batch.answer_pos)]).float()


def time_steps(runs, batches, precision) -> list[float]:
    """Median seconds per full training step (forward, answer-only loss, backward, clip, AdamW) for each
    (model, logits_fn) in `runs`. Steps alternate between the models, so load drift hits all alike."""
    opts = [make_optimizer(model, TrainConfig(lr=1e-4)) for model, _ in runs]
    times = [[] for _ in runs]
    for i, b in enumerate(batches):
        for (model, logits_fn), opt, ts in zip(runs, opts, times):
            t = time.perf_counter()
            loss = F.cross_entropy(logits_fn(model, b, precision), torch.from_numpy(b.target))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if i >= 3:  # warm-up steps excluded
                ts.append(time.perf_counter() - t)
    return [float(np.median(ts)) for ts in times]


def ours(model, b, precision):
    return answer_logits(model, b, "cpu", precision)


def matmul_share(runs, batches) -> list[tuple[float, float]]:
    """(ms per step in matrix multiplies, ms per step in everything else) of each fp32 training step."""
    from torch.profiler import profile

    out = []
    for run in runs:
        time_steps([run], batches[:4], "fp32")  # warm-up
        with profile() as prof:
            time_steps([run], batches[4:], "fp32")
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events)
        mm = sum(e.self_cpu_time_total for e in events if e.key in ("aten::mm", "aten::addmm", "aten::bmm"))
        steps = len(batches) - 4
        out.append((mm / steps / 1e3, (total - mm) / steps / 1e3))
    return out


def dense_vs_single(steps: int, precision: str) -> None:
    """Median full training step (training_loss, backward, clip, AdamW) on single-query batches and on the same
    batches packed; labels per second = labels per batch / step time. Steps alternate between the two."""
    print("\n| model | objects | single ms/step | dense ms/step | step cost | labels/s single | labels/s dense "
          "| labels/s gain |\n|---|---|---|---|---|---|---|---|")
    for name, cfg in (("mini (6 x 64)", ModelConfig(n_layers=6, d_model=64, d_ff=256, n_heads=4)),
                      ("Table 2 (12 x 128)", ModelConfig())):
        torch.manual_seed(0)
        model = Transformer(cfg)
        opt = make_optimizer(model, TrainConfig())
        train = TrainConfig(precision=precision)
        for n in (2, 5, 8):
            rng = np.random.default_rng(n)
            single = [generate(TEXT_S5, 32, rng, n_objects=n) for _ in range(steps + 3)]
            times = {"single": [], "dense": []}
            for i, b in enumerate(single):
                for kind, batch in (("single", b), ("dense", pack_queries(b))):
                    t = time.perf_counter()
                    loss = training_loss(model, batch, train, "cpu")
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    if i >= 3:
                        times[kind].append(time.perf_counter() - t)
            ts, td = (float(np.median(times[k])) for k in ("single", "dense"))
            print(f"| {name} | {n} | {1e3 * ts:.1f} | {1e3 * td:.1f} | {td / ts:.2f}x | {32 / ts:,.0f} "
                  f"| {32 * n / td:,.0f} | {n * ts / td:.2f}x |")


def dag_dry_run_seconds() -> float:
    work = Path(tempfile.mkdtemp(prefix="vlbind-bench-"))
    try:
        for name in ("Snakefile", "workflow", "config", "scripts", "profiles", "src"):
            (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, work / name)
        smk = [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "config/smoke.yaml"]
        subprocess.run(smk, cwd=work, check=True, capture_output=True)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            out = subprocess.run([*smk, "-n"], cwd=work, check=True, capture_output=True, text=True)
            times.append(time.perf_counter() - t)
            assert "Nothing to be done" in out.stdout + out.stderr
        return float(np.median(times))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip-dag", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also split each step into matmul / other time")
    ap.add_argument("--bf16", action="store_true", help="time bf16 even on a CPU without native bf16 (emulated: slow)")
    ap.add_argument("--dense-only", action="store_true", help="only the dense vs single-query table")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    default = precision_for({"cpu": "auto"}, "cpu")  # what training uses on this CPU (config.yaml: cpu: auto)
    print(f"threads={args.threads} torch={torch.__version__}; this CPU: native bf16 "
          f"{'yes' if default == 'bf16' else 'no'}, training default {default}")
    dense_vs_single(args.steps, default)
    if args.dense_only:
        return
    cfg = ModelConfig()
    torch.manual_seed(0)
    model = Transformer(cfg)
    llamas = {attention: llama_like(cfg, attention) for attention in ("sdpa", "eager")}
    print(f"\nparams: ours {count_parameters(model):,}, llama {count_parameters(llamas['sdpa']):,}")
    rng = np.random.default_rng(0)
    batches = [generate(TEXT_S5, 32, rng, n_objects=8) for _ in range(args.steps + 3)]  # length 43
    tokens = sum(b.tokens.size for b in batches[3:]) / len(batches[3:])
    ours_by, hf_by = {}, {}  # seconds per step of each setting: by precision / by attention and precision
    print("\n| model | precision | steps/s | tokens/s | ours vs this |\n|---|---|---|---|---|")
    for precision in ("fp32", "bf16") if default == "bf16" or args.bf16 else ("fp32",):
        runs = [(model, ours)] + [(hf, hf_answer_logits) for hf in llamas.values()]
        t_ours, *t_hf = time_steps(runs, batches, precision)
        ours_by[precision] = t_ours
        print(f"| ours (Table 2) | {precision} | {1 / t_ours:.2f} | {tokens / t_ours:,.0f} | |")
        for attention, t in zip(llamas, t_hf):
            hf_by[f"{attention} attention, {precision}"] = t
            print(f"| HF Llama, equal size, {attention} attention | {precision} | {1 / t:.2f} | {tokens / t:,.0f} "
                  f"| {t / t_ours:.2f}x |")
    p_o, p_l = min(ours_by, key=ours_by.get), min(hf_by, key=hf_by.get)
    t_o, t_l = ours_by[p_o], hf_by[p_l]
    print(f"\nfastest of each: ours ({p_o}) {1 / t_o:.2f} steps/s vs HF Llama ({p_l}) {1 / t_l:.2f} steps/s: "
          f"ours {t_l / t_o:.2f}x")

    if args.profile:
        print("\n| model (fp32, profiled) | matmul ms/step | other ms/step | matmul share |\n|---|---|---|---|")
        runs = [(model, ours), (llamas["sdpa"], hf_answer_logits)]
        for name, (mm, other) in zip(("ours", "HF Llama (sdpa)"), matmul_share(runs, batches[:14])):
            print(f"| {name} | {mm:.1f} | {other:.1f} | {100 * mm / (mm + other):.0f}% |")

    noisy = [generate(NOISE_TEXT, 32, rng, n_objects=8) for _ in range(args.steps + 3)]
    t_text, t_noise = [], []
    for _ in range(2):  # alternate, keep the faster of two medians each
        t_text.append(time_steps([(model, ours)], batches, default)[0])
        t_noise.append(time_steps([(model, ours)], noisy, default)[0])
    t_text, t_noise = min(t_text), min(t_noise)
    t0 = time.perf_counter()
    for _ in range(200):
        generate(NOISE_TEXT, 32, rng)
    t_gen = (time.perf_counter() - t0) / 200
    print(f"\nnoise_text step / text_only step (8 objects, {default}: the training default): {t_noise / t_text:.3f}x "
          f"({1 / t_noise:.2f} vs {1 / t_text:.2f} steps/s)")
    print(f"prompt generation: {1e3 * t_gen:.2f} ms per batch of 32 = {100 * t_gen / t_text:.2f}% of a training step")
    if not args.skip_dag:
        print(f"snakemake -n on a complete smoke tree: {dag_dry_run_seconds():.2f} s (median of 3)")


if __name__ == "__main__":
    main()
