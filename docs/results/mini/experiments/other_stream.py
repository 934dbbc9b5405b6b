"""Side experiment (not in the DAG): stage_variant.py with another training data stream. The DAG draws a stage's
training prompts from numpy's default_rng([seed, stage hash]); this draws them from default_rng([seed, stage
hash, K]) and leaves everything else (parent, settings, validation set) as the DAG's run has it, so it asks:
does the same stage from the same parent pass with other prompts?

    python docs/results/mini/experiments/other_stream.py K STAGE PARENT_DIR OUT_DIR --seed S [stage_variant options]

e.g. `... 1 text_s4 results/models/seed1/text_s3 /tmp/stream1 --seed 1 --evaluate`.
"""
import runpy
import sys
from pathlib import Path

import numpy as np

import vlbind.train

K = int(sys.argv.pop(1))
VALIDATION = 0xA11D  # validation_set's stream tag: that stream stays as it is


class _Numpy:
    """numpy for vlbind.train, but its training stream gets K as a third entropy word."""

    def __getattr__(self, name):
        return getattr(np, name)

    class random:  # noqa: N801 (stands in for the module)
        @staticmethod
        def default_rng(seed=None):
            if isinstance(seed, list) and len(seed) == 2 and seed[1] != VALIDATION:
                seed = [*seed, K]
                print("training stream", seed, flush=True)
            return np.random.default_rng(seed)


vlbind.train.np = _Numpy()
sys.argv = ["stage_variant.py", *sys.argv[1:]]
runpy.run_path(str(Path(__file__).with_name("stage_variant.py")), run_name="__main__")
