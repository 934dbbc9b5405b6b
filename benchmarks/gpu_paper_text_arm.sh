#!/usr/bin/env bash
# Issue 58 on a lent GPU, in one or more calls (docs/results/paper-text-arm.md): the cuDNN attention repro with
# PyTorch's kernel choice and with vlbind's (benchmarks/cudnn_sdpa_repro.py; REPRO=0 leaves it out), then
# config.yaml's text_s1-s4 at the paper's size (12 x 128) on four seeds side by side, train.compile on, each stage to
# 0.95 validation or its cap (text_s4 with its length ramp, as the DAG trains it), for at most SECONDS (default 500).
# The runs live in gpu_run/ (git-ignored): a call made while the machine is still warm keeps the stages finished and
# resumes the others from their last saved state (every 1,000 steps). On the device machine, from the repository
# root, carrying .whl/ (jsonschema and what it needs, for Python 3.12: ../shared/notes/device.md). Writes
# $OUT/repro.md, $OUT/table.md (the stages finished), $OUT/progress.txt (each run's last validation) and $OUT/runs.tgz
# (logs and CSVs, weights left out).
set -uo pipefail
if [[ -d .whl ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
[[ ${REPRO:-1} == 1 ]] && python3 benchmarks/cudnn_sdpa_repro.py 2>&1 | tee "$OUT/repro.md"
timeout -s INT "${SECONDS_LEFT:-500}" python3 benchmarks/bench_dense_curriculum.py --paper --device "${DEVICE:-cuda}" \
    --compile --arms all:checkpoint_every=1000 --seeds ${SEEDS:-0 1 2 3} --stages text_s1 text_s2 text_s3 text_s4 \
    --cap "${CAP:-30000}" --target 0.95 --out gpu_run > "$OUT/bench.txt" 2>&1
echo "bench exit $?"
pkill -INT -f bench_dense_curriculum.py; sleep 3; pkill -KILL -f bench_dense_curriculum.py
cat gpu_run/*.csv > "$OUT/table.md" 2>/dev/null
for log in gpu_run/*.log; do echo "$log: $(grep -c . "$log") lines"; grep -E "val_acc|done" "$log" | tail -2; done \
    > "$OUT/progress.txt"
cat "$OUT/table.md" "$OUT/progress.txt"
tar czf "$OUT/runs.tgz" --exclude='*.safetensors' gpu_run
