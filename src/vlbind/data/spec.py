"""What a stage's prompts are drawn from (appendix D.3-D.5): `StageSpec`, one training stage's task settings (config
key `task`, merged per stage), the fixed text prompts of evaluation and the analyses (`text_retrieval_spec`), and the
two layouts of an association list (`ORDERS`, `in_order`). Drawing the prompts: vlbind.data.tasks."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from vlbind.core.schema import check_fields, schema_defaults
from vlbind.core.settings import config_defaults, from_dict
from vlbind.core.vocab import VOCAB

# The task settings a config may leave out: their one default is the schema's (schema.schema_defaults).
_OPTIONAL = schema_defaults("task")


@dataclass(frozen=True)
@config_defaults("task")
class StageSpec:
    """The prompt distribution of one training stage (appendix D.3-D.5); its defaults are config.yaml's `task`.

    Colors, shapes and items are drawn from the first `n_colors` / `n_shapes` / `n_items` of each group.
    """

    n_colors: int
    n_shapes: int
    n_items: int
    min_objects: int
    max_objects: int
    shuffle: bool  # association list in random order (stage 4); else in context order
    grounding_fraction: float  # share of prompts that are feature grounding
    symmetric_fraction: float  # share queried by shape (items then sit on colors)
    noise_tokens: int  # unattendable noise tokens between consecutive context objects
    noise_fraction: float  # share of prompts that carry noise when noise_tokens > 0
    # share of prompts whose context is images (D.6: 1.0, D.7 mixed: 0.2). Its default lives here, not in the
    # schema: a schema default would drop the `image_fraction: 0.0` the image arm's stages write from their params
    # (params.stage_params) and rerun them in every finished tree
    image_fraction: float = 0.0
    # practice prompts (vlbind.data.tasks' module doc; not in the paper; text only): shares of the retrieval prompts
    lookup_fraction: float = _OPTIONAL["lookup_fraction"]  # one-hop lookups (query an association key, answer its item)
    # of those left, retrieval with the queried object alone in the context
    solo_fraction: float = _OPTIONAL["solo_fraction"]

    def __post_init__(self) -> None:
        check_fields("task", self)  # types and ranges: the schema's (vocabulary sizes: vlbind.core.vocab's)
        if not 1 <= self.min_objects <= self.max_objects:
            raise ValueError(f"StageSpec needs 1 <= min_objects <= max_objects, got {self.min_objects}, "
                             f"{self.max_objects}")
        for key in ("n_colors", "n_shapes", "n_items"):
            if getattr(self, key) < self.max_objects:
                raise ValueError(f"StageSpec.{key}={getattr(self, key)} is smaller than max_objects="
                                 f"{self.max_objects}: objects in a prompt need distinct tokens")
        if (self.lookup_fraction or self.solo_fraction) and self.image_fraction:
            raise ValueError("StageSpec.lookup_fraction / solo_fraction > 0 need image_fraction 0: practice prompts "
                             "are text only")

    @classmethod
    def from_dict(cls, d: dict) -> StageSpec:
        return from_dict(cls, d)

    def to_dict(self) -> dict:
        return asdict(self)

    def for_validation(self) -> StageSpec:
        """What validation measures: the stage's task without practice prompts, and in a text retrieval stage (no
        grounding, no images) queried by color only, the direction the paper evaluates, so that a stage's pass bar
        is judged on it; grounding and image stages keep their mix (grounding is both directions by definition)."""
        spec = replace(self, lookup_fraction=0.0, solo_fraction=0.0)
        return spec if spec.grounding_fraction or spec.image_fraction else replace(spec, symmetric_fraction=0.0)

    @property
    def judged(self) -> str | None:
        """Which prompts of this task's validation set the stop rules, the pass bar and the divergence mark read
        (train.Validation): None where all are of one kind (retrieval or grounding) in one kind of context (text or
        images), else `retrieval` where some are retrieval prompts (the task the DAG evaluates: a model that answers
        grounding and guesses retrieval has not learnt it), `all` where none are."""
        mixed = 0 < self.grounding_fraction < 1 or 0 < self.image_fraction < 1
        return None if not mixed else "retrieval" if self.grounding_fraction < 1 else "all"


def text_retrieval_spec(min_objects: int, max_objects: int) -> StageSpec:
    """The fixed prompts of evaluation and the analyses: the whole vocabulary (vlbind.core.vocab), shuffled association
    lists, retrieval queried by color, no grounding, noise, images or practice; written out in full, so that no
    training default (config.yaml's `task`) reaches them."""
    return StageSpec(n_colors=VOCAB.n_colors, n_shapes=VOCAB.n_shapes, n_items=VOCAB.n_items, min_objects=min_objects,
                     max_objects=max_objects, shuffle=True, grounding_fraction=0.0, symmetric_fraction=0.0,
                     noise_tokens=0, noise_fraction=1.0, image_fraction=0.0, lookup_fraction=0.0, solo_fraction=0.0)


# "order" names one thing: how a prompt's association list is laid out, in context order or in random order
# (StageSpec.shuffle is the same choice as a task setting; Batch.association_slots is where each entry went). The
# analyses take it from their entry point (config key interp.order; the paper's: shuffled), never a default.
ORDERS = ("fixed", "shuffled")


def in_order(spec: StageSpec, order: str) -> StageSpec:
    """`spec` with its association list in `order`, one of ORDERS."""
    if order not in ORDERS:
        raise ValueError(f"prompt order {order!r}; valid: {ORDERS}")
    return replace(spec, shuffle=order == "shuffled")
