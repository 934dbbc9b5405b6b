"""What an interchange intervention shows, in one vocabulary for the from-scratch models (interp.interchange,
interp.circuits: circuits.csv) and the Qwen models (qwen.binding: table1.csv), and the layer rules that read it.
No torch: tables in, layers out.

The label of one patched answer names what it follows (paper, section 5.2 and appendix F; Gur-Arieh et al.):
    positional  the entry at the counterfactual's position: positional binding
    color_key   the color, matched again (from-scratch models: Symbolic-A)
    shape_key   the shape, matched again (from-scratch models: Symbolic-B)
    symbolic    the key word, matched again (Qwen models: Gur-Arieh et al.'s lexical mechanism)
    reflexive   the counterfactual's own answer (a read-out of an answer already computed)
    no_effect   the original answer
    mixed       anything else
The from-scratch task has two keys to match (color, shape), the Qwen task one (the object's word), so each
table uses its subset: SCRATCH_LABELS and QWEN_LABELS. SYMBOLIC names the key-matching labels of both.

The layer rules take `effect`, a share per layer (a Series indexed by layer), which each caller defines:
- first_spike(effect, threshold, relative=False): appendix F's "first spike in causal effect". Absolute: the
  first layer where effect >= threshold. Relative: the first layer where effect >= threshold * its maximum,
  followed up while effect keeps rising (the spike's top). None where no layer qualifies, or (relative) the
  maximum is below min_effect.
- peak(effect, min_effect): section 5.6's "layer with the highest intervention effect".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SCRATCH_LABELS = ("positional", "color_key", "shape_key", "reflexive", "no_effect", "mixed")
QWEN_LABELS = ("positional", "symbolic", "reflexive", "no_effect", "mixed")
SYMBOLIC = ("color_key", "shape_key", "symbolic")


def first_spike(effect: pd.Series, threshold: float, relative: bool = False, min_effect: float = 0.0) -> int | None:
    """The first layer where `effect` reaches `threshold` (absolute) or threshold x its maximum, then up to the
    spike's top (relative); see the module doc."""
    effect = effect.sort_index()
    if effect.empty:
        return None
    layers, values = list(effect.index), effect.to_numpy()
    if relative:
        top = values.max()
        if not top >= min_effect or top <= 0:
            return None
        i = int(np.argmax(values >= threshold * top))
        while i + 1 < len(values) and values[i + 1] > values[i]:
            i += 1
        return int(layers[i])
    hit = np.flatnonzero(values >= threshold)
    return int(layers[hit[0]]) if len(hit) else None


def peak(effect: pd.Series, min_effect: float) -> int | None:
    """The layer of `effect`'s maximum (the first, if tied); None when the maximum is below min_effect."""
    top = effect.max()
    if not top >= min_effect or top <= 0:
        return None
    return int(effect.sort_index().idxmax())
