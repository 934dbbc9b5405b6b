"""The training DAG (paper, appendix D.3-D.7): which stage starts from which, which stages read images, which
stage each variant is, and the two controls. Names only: no config, no torch, so the Snakefile and every module
can use it. What a stage trains on is config.yaml's (vlbind.params.stage_params)."""

from __future__ import annotations

# The training DAG (paper, appendix D.3-D.7): each stage starts from its parent's checkpoint.
STAGE_PARENTS: dict[str, str | None] = {
    "text_s1": None, "text_s2": "text_s1", "text_s3": "text_s2", "text_s4": "text_s3",
    "text_s5": "text_s4", "noise_text": "text_s5", "grounding": "noise_text",
    "image": "grounding", "mixed": "image", "image_text": "mixed", "noise_image_text": "image_text",
    # the binding-loss control (not in the paper): text models continued with the image arm's aid, that loss
    "text_bind": "text_s5", "noise_text_bind": "noise_text", "text_bind_shuffled": "text_s5",
    # the curriculum control (not in the paper): the image arm's stages from the same parent, every context in text
    "curriculum_image": "grounding", "curriculum_mixed": "curriculum_image", "curriculum_text": "curriculum_mixed",
    "noise_curriculum_text": "curriculum_text",
    # the noise control (not in the paper): text_s5 trained on without noise for as long as noise_text trained
    "text_long": "text_s5",
}
# Stages that depend on an image encoder live in run `seed{S}-{encoder}`; the rest in run `seed{S}`.
# grounding (D.5) is text-only, so it is trained once per seed and shared by every encoder's run.
VISION_STAGES = ("image", "mixed", "image_text", "noise_image_text")
TEXT_STAGES = tuple(s for s in STAGE_PARENTS if s not in VISION_STAGES)
# Variant name -> the stage whose checkpoint it is: the one list of variants, in the order tables and figures show
# them (the paper's four, the curriculum control, the binding-loss control). The schema's enum (schema.schema) and
# tables.VARIANT_ORDER are read from it.
VARIANT_STAGE = {"text_only": "text_s5", "noise_text": "noise_text", "image_text": "image_text",
                 "noise_image_text": "noise_image_text", "curriculum_text": "curriculum_text",
                 "noise_curriculum_text": "noise_curriculum_text", "text_bind": "text_bind",
                 "noise_text_bind": "noise_text_bind", "text_bind_shuffled": "text_bind_shuffled",
                 "text_long": "text_long"}
# The binding-loss control: each control stage -> the image-arm stage whose binding-loss weight it must use. A
# control trains on its parent's task (text_bind_shuffled: with the list shuffled; params.stage_section derives
# it) and config.validate() checks the weight: the control and its text parent differ in the binding loss alone.
CONTROLS = {"text_bind": "image_text", "noise_text_bind": "noise_image_text", "text_bind_shuffled": "image_text"}
# The curriculum control: each of its stages -> the image-arm stage it copies, section for section (task, start,
# train: the same starts, caps and binding loss), with image_fraction 0: the image arm's curriculum without images.
# It has no section of its own in a config (params.stage_section derives it), so it cannot drift from the image arm.
CURRICULUM = {"curriculum_image": "image", "curriculum_mixed": "mixed", "curriculum_text": "image_text",
              "noise_curriculum_text": "noise_image_text"}
# The noise control: its stage -> the stage it trains as long as. text_long is noise_text without the noise: its
# parent's task (text_s5's), noise_text's train settings, and at run time the steps of the weights noise_text kept, at
# the lr of their attempt, with no stop rule before them and the last step's weights kept (attempts.as_long_as), so
# that noise_text > text_long differs in the noise alone; noise_text > text_only mixes noise with more training. No
# section of its own (params.stage_section).
NOISE_CONTROL = {"text_long": "noise_text"}


def chain_below(stage: str) -> int:
    """How many stages the longest chain from `stage` to a last stage holds, `stage` included (text_s1: 11,
    noise_image_text and the controls: 1): the training rules' priority, so that the long chains (the critical
    path of a run) start first and short side branches fill in."""
    children = [s for s, parent in STAGE_PARENTS.items() if parent == stage]
    return 1 + max((chain_below(c) for c in children), default=0)


def lineage(stage: str) -> list[str]:
    """The stages from text_s1 to `stage`, in training order."""
    chain = [stage]
    while STAGE_PARENTS[chain[-1]] is not None:
        chain.append(STAGE_PARENTS[chain[-1]])
    return chain[::-1]
