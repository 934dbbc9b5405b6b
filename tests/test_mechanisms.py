"""The layer rules both interchange tables are read with (vlbind.interp.mechanisms), against a reading by hand."""

import pandas as pd
import pytest

from vlbind.interp.interchange import LABELS as SCRATCH
from vlbind.interp.mechanisms import QWEN_LABELS, SCRATCH_LABELS, SYMBOLIC, first_spike, peak
from vlbind.qwen.binding import LABELS as QWEN

#        layer:  0     1     2     3     4     5
EFFECT = [0.05, 0.30, 0.45, 0.40, 0.80, 0.90]


@pytest.mark.parametrize("threshold, relative, min_effect, layer", [
    (0.5, False, 0.0, 4),    # absolute: the first layer >= 0.5
    (0.3, False, 0.0, 1),    # ... >= 0.3 (equality counts)
    (0.95, False, 0.0, None),
    (0.5, True, 0.0, 2),     # relative: first >= 0.45 (0.5 x 0.9) is layer 2, which is a spike's top (3 < 2)
    (0.3, True, 0.0, 2),     # first >= 0.27 is layer 1, then up while rising: 2
    (0.5, True, 0.95, None),  # the maximum is below min_effect
])
def test_first_spike_absolute_and_relative(threshold, relative, min_effect, layer):
    effect = pd.Series(EFFECT, index=range(6)).sample(frac=1, random_state=0)  # any order of layers
    assert first_spike(effect, threshold, relative, min_effect) == layer


def test_peak_is_the_first_maximum_and_needs_min_effect():
    assert peak(pd.Series([0.1, 0.7, 0.7, 0.2]), 0.1) == 1
    assert peak(pd.Series([0.1, 0.2]), 0.5) is None
    assert first_spike(pd.Series(dtype=float), 0.5) is None


def test_one_vocabulary_for_both_tables():
    assert SCRATCH == SCRATCH_LABELS and QWEN == QWEN_LABELS
    shared = set(SCRATCH) & set(QWEN)
    assert shared == {"positional", "reflexive", "no_effect", "mixed"}
    assert {*SCRATCH, *QWEN} - shared == set(SYMBOLIC)  # the only difference: which keys are matched again
