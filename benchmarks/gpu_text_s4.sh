#!/usr/bin/env bash
# The text_s4 sweep's grid in one call on a lent GPU (issue 50; docs/results/text-s4.md). On the device machine,
# from the repository root, carrying .whl/ (wheels of what that machine lacks: jsonschema and its dependencies,
# built here with a Python 3.12: ../shared/notes/device.md) and sweep_parents/seed{S}/text_s3 (the text_s3 weights
# and optimizer state bench_dense_curriculum.py --out writes). Every arm on 3 seeds with train.compile, one eager
# copy of `base` beside them to time compiled against eager; each run stops after MINUTES (default 7) of wall time.
# ARMS (default: the grid below) replaces the compiled arms; EAGER=0 leaves the eager copy out. Writes
# $OUT/grid (the compiled grid) and $OUT/eager (a CSV and a log per run) and all of it, weights left out, in
# $OUT/text_s4.tgz (a device call brings back a few files only).
set -euo pipefail
python3 -c "import jsonschema" 2>/dev/null || python3 -m pip install -q --no-index --find-links .whl --target /tmp/site jsonschema
export PYTHONPATH=/tmp/site:$PWD/src TORCHINDUCTOR_COMPILE_THREADS=1  # 16 processes compile side by side
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
minutes=${MINUTES:-7}
common=(--parents 'sweep_parents/seed{seed}/text_s3' --device "${DEVICE:-cuda}" --steps 100000 --target 0.95 --minutes "$minutes")
arms=${ARMS:-base solo=0.5 one+solo=0.5+ramp solo=0.5+ramp+carry solo=0.5+lookup=0.3+ramp+carry+batch_size=256+lr=3e-4}
if [[ ${EAGER:-1} == 1 ]]; then
    python3 benchmarks/bench_text_s4.py "${common[@]}" --arms base+eager --seeds 0 --out "$OUT/eager" \
        > "$OUT/eager.txt" 2>&1 &
fi
# shellcheck disable=SC2086  # arms: one word each
python3 benchmarks/bench_text_s4.py "${common[@]}" --compile --seeds 0 1 2 --out "$OUT/grid" --arms $arms
wait
[[ -f $OUT/eager.txt ]] && cat "$OUT/eager.txt"
tar czf "$OUT/text_s4.tgz" --exclude='*.safetensors' -C "$OUT" $(cd "$OUT" && ls -d grid eager 2>/dev/null)
rm -rf "$OUT/grid" "$OUT/eager"
