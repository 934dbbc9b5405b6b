"""The circuit label of one trained model, from its interchange table (interp.interchange) and its probe table
(interp.probes): the documented rule of circuit_label, with the thresholds of config key interp.circuits.

The interchange table's last layer is the residual stream after the last block, the read-out: patching it
hands the original run the counterfactual's finished answer, so it reads reflexive by construction and says
nothing about how the answer was bound. The rule never looks at it (`readout_layer` names it in the row).

The table has a row per patched position (interp.interchange.POSITIONS). The rule reads [ANSWER], the paper's
position, first; where [ANSWER] shows no spike before the read-out (a model that computes its answer at the query
token and copies it to [ANSWER] in its last block), it reads the query token, then both together, and
`label_position` says which it read. A patch at the query token entering the first block swaps the query token
itself, so at those positions the rule leaves layer 0 out as it leaves out the read-out.

Two readings (circuit_label): the first spike (appendix F's rule: `circuit`) and the last layer before the read-out
(`last_circuit`, at the same position), each with its shares. They differ where the queried attribute reaches
[ANSWER] early and the model then looks it up by position: a first spike can read Symbolic-A from a color-key share
of ~0.5 at layer 2 while the layer before the read-out is positional on ~1.0 of pairs (mini's text runs).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from vlbind.core.settings import config_defaults
from vlbind.interp.mechanisms import SCRATCH_LABELS as LABELS
from vlbind.interp.mechanisms import first_spike


def effect(interchange: pd.DataFrame) -> pd.Series:
    """Share of pairs whose answer the patch changes (1 - no_effect), per layer: appendix F's "causal effect",
    any change counting (reflexive and mixed too). Empty when no pair was kept (the model solves none)."""
    if interchange["count"].sum() == 0:
        return pd.Series(dtype=float)
    return 1 - interchange[interchange["label"] == "no_effect"].set_index("layer")["fraction"]


CIRCUITS = {"positional": "Positional", "color_key": "Symbolic-A", "shape_key": "Symbolic-B"}
# the mechanisms a label can name, the circuits first so that a tie goes to a circuit
CANDIDATES = (*CIRCUITS, *(k for k in LABELS if k not in CIRCUITS and k != "no_effect"))


@dataclass(frozen=True)
@config_defaults("interp.circuits")
class CircuitRule:
    """The labelling rule's thresholds: config key interp.circuits (defaults: config.yaml's)."""
    spike_threshold: float  # first spike: the first layer where >= this share of answers change
    probe_margin: float  # probe accuracy above chance that counts as decodable
    weak_share: float  # weak: fewer than this share of the pairs follow the winner ...
    weak_lead: float  # ... or it leads the runner-up by less than this
    min_pairs: int  # a run that answers fewer interchange pairs (both prompts) shows no mechanism: "none"


READ_ORDER = ("answer", "query", "both")  # the positions the rule reads, until one shows a spike (module doc)


def circuit_label(interchange: pd.DataFrame, probes: pd.DataFrame, rule: CircuitRule = CircuitRule()) -> dict:
    """Label one run Positional, Symbolic-A (color key) or Symbolic-B (shape key); the documented rule
    (thresholds: `rule`):

    1. interchange: at the first layer before the read-out (module doc) where patching changes the answer
       in >= spike_threshold of the pairs (appendix F: the first spike is the mechanism), the largest of the
       positional, color-key, shape-key, reflexive and mixed shares (`winner`) names the circuit. Patched at
       [ANSWER]; where that shows no such layer, at the query token, then at both (layer 0 left out there;
       `label_position`). No such layer at any, or fewer than `min_pairs` pairs kept (a model near chance
       answers a handful, too few to read a mechanism from) -> "none"; a reflexive or mixed winner ->
       "unresolved" (the mechanism is not visible there).
    2. margin: `runner_up` is the next largest of those shares; the label is `weak` when fewer than
       `weak_share` of the pairs follow the winner, or it leads the runner-up by less than `weak_lead`.
    3. probes (appendix G): the symbolic circuits bind color into the context shape token, so the best
       layer's accuracy of decoding color at the context shape exceeds chance by >= probe_margin. The
       label is kept either way; `probes_agree` says whether the probe signature matches it.
    4. the second reading (module doc): the same winner rule at the layer before the read-out (`last_layer`), at
       `label_position` ([ANSWER] where no position showed a spike), when patching there changes >= spike_threshold
       of the answers: `last_circuit`, `last_winner`, `last_share_*`; "none" otherwise.
    """
    readout = int(interchange["layer"].max())
    if "position" not in interchange:  # a table of [ANSWER] patches only
        interchange = interchange.assign(position="answer")
    spike, position, at_spike = None, None, interchange.iloc[:0]
    for position in READ_ORDER:
        rows = interchange[(interchange["position"] == position) & (interchange["layer"] < readout)]
        if position != "answer":
            rows = rows[rows["layer"] > 0]  # layer 0 swaps the query token itself (module doc)
        spike = first_spike(effect(rows), rule.spike_threshold) if len(rows) else None  # absolute
        if spike is not None:
            at_spike = rows[rows["layer"] == spike].set_index("label")["fraction"]
            break
    binding = probes[(probes["role"] == "context shape") & (probes["attribute"] == "color")]
    margin = float((binding["accuracy"] - binding["chance"]).max()) if len(binding) else float("nan")
    shares = {k: float(at_spike.get(k, 0.0)) if spike is not None else float("nan") for k in LABELS}
    kept = int(interchange["pairs_kept"].iloc[0]) if "pairs_kept" in interchange and len(interchange) else None
    too_few = kept is not None and kept < rule.min_pairs
    if too_few:
        spike = None
    out = {"pairs_kept": kept, "spike_layer": spike, "label_position": position if spike is not None else None,
           "readout_layer": readout, "color_at_context_shape": margin,
           **{f"share_{k}": v for k, v in shares.items()},
           **_last_layer_reading(interchange, readout - 1, position if spike is not None else "answer",
                                 rule.spike_threshold, too_few)}
    if spike is None:
        return {**out, "circuit": "none", "winner": None, "winner_share": float("nan"), "runner_up": None,
                "runner_up_share": float("nan"), "weak": None, "probes_agree": None}
    winner, runner_up = _ranked(shares)[:2]
    out |= {"winner": winner, "winner_share": shares[winner], "runner_up": runner_up,
            "runner_up_share": shares[runner_up],
            "weak": shares[winner] < rule.weak_share or shares[winner] - shares[runner_up] < rule.weak_lead}
    if winner not in CIRCUITS:
        return {**out, "circuit": "unresolved", "probes_agree": None}
    symbolic = winner != "positional"
    return {**out, "circuit": CIRCUITS[winner], "probes_agree": symbolic == (margin >= rule.probe_margin)}


def _ranked(shares: dict[str, float]) -> list[str]:
    """CANDIDATES by share, largest first; stable: ties keep CANDIDATES' order (a circuit first)."""
    return sorted(CANDIDATES, key=lambda k: -shares[k])


def _last_layer_reading(interchange: pd.DataFrame, layer: int, position: str, threshold: float,
                        too_few: bool) -> dict:
    """circuit_label's second reading (its step 4): the winner of the shares at `layer`, at `position`, where
    patching there changes >= `threshold` of the answers and the run kept enough pairs (not `too_few`)."""
    rows = interchange[(interchange["position"] == position) & (interchange["layer"] == layer)]
    changed = effect(rows)
    readable = not too_few and len(changed) > 0 and changed.iloc[0] >= threshold
    shares = rows.set_index("label")["fraction"]
    shares = {k: float(shares.get(k, 0.0)) if readable else float("nan") for k in LABELS}
    winner = _ranked(shares)[0] if readable else None
    circuit = "none" if winner is None else CIRCUITS.get(winner, "unresolved")
    return {"last_layer": layer, "last_circuit": circuit, "last_winner": winner,
            "last_winner_share": shares[winner] if winner else float("nan"),
            **{f"last_share_{k}": v for k, v in shares.items()}}
