#!/usr/bin/env bash
# Issue 58's A/B on a lent GPU: config.yaml's text_s1-s3 at the paper's size, seeds 1 and 3, train.compile on, once
# with PyTorch's own attention kernel choice (cuDNN included: the code path before model.SDPA_BACKENDS) and once
# with vlbind's, side by side for SECONDS (default 420); skipped steps count the non-finite gradients. Carry .whl/.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=1
common=(--paper --device cuda --compile --arms all:checkpoint_every=1000 --seeds 1 3 --stages text_s1 text_s2 text_s3
        --cap 30000 --target 0.95)
timeout -s INT "${SECONDS_LEFT:-420}" python3 benchmarks/bench_dense_curriculum.py "${common[@]}" --cudnn-attention \
    --out ab/cudnn > "$OUT/cudnn.txt" 2>&1 &
timeout -s INT "${SECONDS_LEFT:-420}" python3 benchmarks/bench_dense_curriculum.py "${common[@]}" --out ab/vlbind \
    > "$OUT/vlbind.txt" 2>&1
wait
pkill -KILL -f bench_dense_curriculum.py
for arm in cudnn vlbind; do
    echo "## $arm"; cat ab/$arm/*.csv
    for log in ab/$arm/*.log; do echo "$log"; grep -E "val_acc|done" "$log" | tail -3; done
done | tee "$OUT/ab.md"
tar czf "$OUT/ab.tgz" --exclude='*.safetensors' ab
