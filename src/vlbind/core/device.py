"""Which device a job runs on and in which autocast precision: `device: auto` and `precision: auto` in the
config resolve here, for the machine the job lands on (torch is imported only when CUDA is asked about).
"""

from __future__ import annotations

import functools
import itertools
import os
import tempfile
import warnings
from pathlib import Path
from typing import IO

from vlbind.core.settings import ConfigError


def resolve_device(name: str) -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"config 'device: {name}' asks for CUDA, which this machine lacks; use 'auto' or 'cpu'")
    return name


_CLAIMED: list[IO] = []  # this process's GPU lock: held until it exits


def claim_gpu(count: int, lock_dir: str | Path | None = None) -> tuple[int, IO]:
    """(index, lock) of the GPU a job runs on when it sees `count` > 1: the first GPU with the fewest jobs, by
    lock files (`vlbind-gpu{index}-slot{k}.lock` in `lock_dir`, default $VLBIND_GPU_LOCKS or the temporary
    directory) held while the lock stays open; the OS frees a killed job's. So the jobs of one machine spread
    over its GPUs (`--resources gpu=N` caps how many run at once) instead of all landing on cuda:0. Under SLURM
    a job sees only its own GPU and claims nothing."""
    import fcntl

    lock_dir = Path(lock_dir or os.environ.get("VLBIND_GPU_LOCKS") or tempfile.gettempdir())
    for slot in itertools.count():
        for gpu in range(count):
            lock = open(lock_dir / f"vlbind-gpu{gpu}-slot{slot}.lock", "a")
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            return gpu, lock
    raise AssertionError("unreachable")


def precision_for(precision: dict, device: str) -> str:
    """The autocast precision a `precision` section gives `device` ('cuda:1' -> its 'cuda' entry).
    'auto' on a CPU is bf16 where the CPU has native bf16 instructions, else fp32 (emulated bf16 was 7-12x
    slower per training step than fp32 on an AVX2-only CPU; benchmarks-text-arm.md); 'auto' on CUDA is bf16
    where the GPU supports it (Ampere and newer), else fp32.
    Warns when bf16 is asked for explicitly on a CPU without native bf16."""
    kind = device.split(":")[0]
    chosen = precision.get(kind, "fp32")
    if chosen == "auto":
        return "bf16" if (cpu_has_bf16() if kind == "cpu" else cuda_has_bf16()) else "fp32"
    if chosen == "bf16" and kind == "cpu" and not cpu_has_bf16():
        warnings.warn("bf16 autocast on a CPU without AVX512-BF16 or AMX is several times slower than fp32; set "
                      "precision.cpu and vision.precision.cpu to auto or fp32 in your config", stacklevel=2)
    return chosen


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether this CPU has bf16 instructions (Linux: /proc/cpuinfo flags avx512_bf16 or amx_bf16); True
    where that cannot be read, so nothing warns by mistake."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return True
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cuda_has_bf16() -> bool:
    """Whether the CUDA GPU computes bf16 natively (Ampere and newer)."""
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)


def autocast(device, precision: str):
    """bf16 autocast on `device` when `precision` (what precision_for chose) is "bf16", else a no-op context: an
    autocast the caller opened stays on (interp.analyze opens one around code that calls this with "fp32")."""
    from contextlib import nullcontext

    import torch

    if precision != "bf16":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def job_device(name: str, threads: int, precision: dict | None = None) -> tuple[str, str]:
    """What every model job does first: use `threads` torch threads, resolve config key `device` (`name`; plain
    `cuda` or `auto` on a machine with several GPUs: the one claim_gpu gives) and its `precision` section (the
    autocast precision_for picks; without one "fp32", no autocast: a Qwen job computes in its weights' dtype) for this
    machine, and log where the job runs, e.g.
    "device cuda:1 (NVIDIA H200), bf16 autocast" or "device cpu, 1 thread, bf16 autocast". Returns (device,
    precision)."""
    import logging

    import torch

    torch.set_num_threads(threads)
    device = resolve_device(name)
    if device == "cuda" and torch.cuda.device_count() > 1:
        gpu, lock = claim_gpu(torch.cuda.device_count())
        _CLAIMED.append(lock)
        device = f"cuda:{gpu}"
    chosen = precision_for(precision, device) if precision is not None else "fp32"
    if device.startswith("cuda"):
        where = f"{device if ':' in device else 'cuda:' + str(torch.cuda.current_device())} " \
                f"({torch.cuda.get_device_name(torch.device(device))})"
    else:
        where = f"cpu, {threads} thread{'s' if threads != 1 else ''}"
        if chosen == "bf16":
            where += "" if cpu_has_bf16() else " (no native bf16: emulated, slow)"
    what = "no autocast: the weights' dtype" if precision is None else "bf16 autocast" if chosen == "bf16" else "fp32"
    logging.getLogger("vlbind").info("device %s, %s", where, what)
    return device, chosen
