"""What a figure's caption and footnote say about the run that made it, written from the config itself (so a
figure cannot misstate it): `training_note`, the report caption's line on what each variant was trained on, and
`figure_note`, the footnote under a figure (the scale it ran at). No torch, no matplotlib: the Snakefile passes
both to the figure rules as params."""

from __future__ import annotations

from vlbind.core.stages import CONTROLS, NOISE_CONTROL, VARIANT_STAGE, lineage
from vlbind.params import stage_section, stage_train


def training_note(config: dict, variants: list[str]) -> str:
    """What each variant's model was trained on, in one line per group of variants trained alike, from the
    config itself (so a figure cannot misstate it): the association-list order of its last stage, the stages
    skipped (max_steps 0), where the binding loss starts and, for a control, its budget."""
    groups: dict[str, list[str]] = {}
    for v in variants:
        stage = VARIANT_STAGE[v]
        stages = lineage(stage)
        order = "shuffled" if stage_section(config, stage)["task"]["shuffle"] else "fixed-order"
        skipped = [s for s in stages if stage_train(config, s)["max_steps"] == 0]
        bound = [s for s in stages if stage_train(config, s)["binding_loss"] > 0]
        text = f"{order} lists"
        if skipped:
            text += f" ({', '.join(skipped)} skipped)"
        if bound:
            weight = stage_train(config, bound[0])["binding_loss"]
            text += f", binding loss {weight:g} from {bound[0]} on"
        else:
            text += ", no binding loss"
        if stage in CONTROLS:
            train = stage_train(config, stage)
            text += f" ({train['max_steps']} steps, last weights)" if train.get("keep") == "last" else ""
        if stage in NOISE_CONTROL:
            text += f" (as many steps as {NOISE_CONTROL[stage]}, without its noise)"
        groups.setdefault(text, []).append(v)
    return "; ".join(f"{', '.join(vs)}: {text}" for text, vs in groups.items())


def figure_note(config: dict, analysis_order: str | None = None) -> str:
    """A figure's footnote: the config's figure_note (the scale it ran at) and, for the analyses' figures, the
    order of their prompts' association lists. What each variant was trained on (training_note) goes in the
    report's caption."""
    parts = [config["figure_note"]]
    if analysis_order is not None:
        parts.append(f"Analysis prompts: {'shuffled' if analysis_order == 'shuffled' else 'fixed-order'} lists")
    return " ".join(p.rstrip(".") + "." for p in parts if p)
