"""Does this machine's torch still have the cuDNN attention bug that model.SDPA_BACKENDS avoids? Prints, for masked
attention at the key lengths our batches have (64 tokens: packed text_s3) and the public repro's (704), how many
grad_q entries are not finite through PyTorch's default kernel choice and through vlbind's (`model.sdpa`, cuDNN left
out), and which kernel the default picks. Needs CUDA; asserts nothing.

    python benchmarks/cudnn_sdpa_repro.py

The inputs are pytorch/pytorch#196678's: every logit ~ -120, so each query row's log-sum-exp lies below -88.7.
"""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from vlbind.model.transformer import sdpa


def grad_q_non_finite(attend, L: int, D: int, heads: int = 4) -> int:
    torch.manual_seed(0)
    q = torch.randn(1, heads, L, D, device="cuda", dtype=torch.bfloat16) * 0.1
    k = torch.randn(1, heads, L, D, device="cuda", dtype=torch.bfloat16) * 0.1
    v = torch.randn(1, heads, L, D, device="cuda", dtype=torch.bfloat16)
    q[..., 0], k[..., 0] = 1.0, -120 * math.sqrt(D)
    q.requires_grad_()
    mask = torch.ones(L, L, dtype=torch.bool, device="cuda").tril()[None, None]
    out = attend(q, k, v, attn_mask=mask)
    out.backward(torch.randn_like(out))
    return int((~torch.isfinite(q.grad)).sum())


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("cudnn_sdpa_repro.py needs a CUDA GPU (the bug is in cuDNN's attention kernel)")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print("| key length | head dim | default choice: grad_q non-finite | cuDNN alone | vlbind.model.transformer.sdpa |")
    print("|---|---|---|---|---|")
    for L, D in [(64, 32), (192, 32), (704, 64), (128, 32)]:
        default = grad_q_non_finite(F.scaled_dot_product_attention, L, D)
        try:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                cudnn = grad_q_non_finite(F.scaled_dot_product_attention, L, D)
        except RuntimeError as e:  # cuDNN refuses these inputs: the default cannot have picked it
            cudnn = f"refused ({str(e).splitlines()[0][:60]})"
        print(f"| {L} | {D} | {default} | {cudnn} | {grad_q_non_finite(sdpa, L, D)} |")


if __name__ == "__main__":
    main()
