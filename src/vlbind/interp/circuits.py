"""The circuit label of one trained model, from its interchange table (interp.interchange) and its probe table
(interp.probes): the documented rule of circuit_label, with the thresholds of config key interp.circuits."""

from __future__ import annotations

import pandas as pd

from .interchange import LABELS


def first_spike(table: pd.DataFrame, threshold: float = 0.5) -> int | None:
    """The first layer where patching changes the answer in at least `threshold` of the pairs (None if
    none does, or no pair was kept because the model solves none)."""
    if table["count"].sum() == 0:
        return None
    effect = 1 - table[table["label"] == "no_effect"].set_index("layer")["fraction"].sort_index()
    hit = effect[effect >= threshold]
    return int(hit.index[0]) if len(hit) else None


CIRCUITS = {"positional": "Positional", "color_key": "Symbolic-A", "shape_key": "Symbolic-B"}


def circuit_label(interchange: pd.DataFrame, probes: pd.DataFrame, spike_threshold: float = 0.5,
                  probe_margin: float = 0.2) -> dict:
    """Label one run Positional, Symbolic-A (color key) or Symbolic-B (shape key); the documented rule:

    1. interchange: at the first layer where patching changes the answer in >= spike_threshold of the
       pairs (appendix F: the first spike is the mechanism), the largest of the positional, color-key and
       shape-key shares names the circuit. No spike -> "none"; if reflexive or mixed outweighs all three
       there, the mechanism is not visible at the spike -> "unresolved".
    2. probes (appendix G): the symbolic circuits bind color into the context shape token, so the best
       layer's accuracy of decoding color at the context shape exceeds chance by >= probe_margin. The
       label is kept either way; `probes_agree` says whether the probe signature matches it.
    """
    spike = first_spike(interchange, spike_threshold)
    binding = probes[(probes["role"] == "context shape") & (probes["attribute"] == "color")]
    margin = float((binding["accuracy"] - binding["chance"]).max()) if len(binding) else float("nan")
    at_spike = interchange[interchange["layer"] == spike].set_index("label")["fraction"]
    shares = {k: float(at_spike.get(k, 0.0)) for k in LABELS}
    out = {"spike_layer": spike, "color_at_context_shape": margin, **{f"share_{k}": v for k, v in shares.items()}}
    if spike is None:
        return {**out, "circuit": "none", "probes_agree": None}
    best = max(CIRCUITS, key=shares.get)
    if max(shares["reflexive"], shares["mixed"]) > shares[best]:
        return {**out, "circuit": "unresolved", "probes_agree": None}
    symbolic = best != "positional"
    return {**out, "circuit": CIRCUITS[best], "probes_agree": symbolic == (margin >= probe_margin)}
