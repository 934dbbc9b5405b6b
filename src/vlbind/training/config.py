"""The settings of one training attempt (config key `train`, merged per stage: params.stage_train): `TrainConfig`, and
how many attempts a unit's meta.json records (`attempt_count`). Its own module, below everything that reads it (the
loop, attempts, losses, optim, resume; the evaluation's tables), and torch-free, so that none of them imports another
to name it."""

from __future__ import annotations

from dataclasses import dataclass

from vlbind.core.schema import check_fields, schema_defaults
from vlbind.core.settings import config_defaults, from_dict

# The settings a config may leave out (not in the paper, or off there): their one default is the schema's
# (schema.schema_defaults), which also keeps them out of a stage's params while they hold it.
_OPTIONAL = schema_defaults("train")


@dataclass(frozen=True)
@config_defaults("train", stall_margin="divergence.stall_margin")
class TrainConfig:
    lr: float
    warmup_steps: int
    batch_size: int
    grad_clip: float
    weight_decay: float
    eval_every: int
    val_size: int
    target_accuracy: float | None  # None: train until plateau or max_steps
    patience: int
    min_delta: float
    # > 0 (not in the paper): the plateau rule waits until the best validation exceeds chance by this much, so a
    # stage never stops in the chance phase that precedes learning; 0: it never waits
    plateau_above_chance: float = _OPTIONAL["plateau_above_chance"]
    max_steps: int
    # a stage that skips more steps (a non-finite loss or gradient) ends (module doc)
    max_skipped_steps: int = _OPTIONAL["max_skipped_steps"]
    checkpoint_every: int  # rounded up to a multiple of eval_every
    precision: str = "fp32"  # "fp32" or "bf16" (autocast)
    # the training step's forward through torch.compile (CUDA: CUDA graphs); off: eager
    compile: bool = _OPTIONAL["compile"]
    # training prompts: "all" objects queried (pack_queries; config.yaml's [changed]) or "one" query each (the
    # paper's, which did not leave chance at text_s1: config.yaml)
    queries: str = _OPTIONAL["queries"]
    binding_loss: float = _OPTIONAL["binding_loss"]  # weight of the binding loss (module doc); 0: off (paper)
    keep: str = _OPTIONAL["keep"]  # weights kept: "best" validation (paper) or "last" step (module doc)
    # a length ramp (not in the paper; attempts.train_stage): min_objects alone first, one more at a time
    ramp: bool = _OPTIONAL["ramp"]
    # the retry rule (not in the paper; training.attempts): up to `attempts` attempts of a stage (or ramp length) that
    # ends below its pass bar (target_accuracy, else pass_accuracy), each retry at retry_lr_factor x the last one's
    # lr; with a retry left an attempt also ends on the stall rule (`stall_steps` steps without a validation gain of
    # `stall_gain`, or within stall_margin of chance), and gives its steps back to the cap
    attempts: int = _OPTIONAL["attempts"]
    pass_accuracy: float | None = _OPTIONAL["pass_accuracy"]
    stall_steps: int | None = _OPTIONAL["stall_steps"]
    stall_gain: float = _OPTIONAL["stall_gain"]
    retry_lr_factor: float = _OPTIONAL["retry_lr_factor"]  # each retry's lr: the last attempt's times this
    # the stall rule's second clause: an attempt whose judged validation (train.Validation) stays within this of its
    # chance for stall_steps steps after its start phase ends too. Not a `train` key: divergence.stall_margin, the
    # margin that marks a stage stalled at chance (params.stage_train); None: off
    stall_margin: float | None
    attempt: int = 1  # which attempt this is (vlbind.training.attempts); from the second on it enters the data RNG
    # the step runs the batch sorted by length, as sub-batches of at most this many positions, each cut to its
    # longest (the same loss with less padding; not in the paper; _step); None: whole. The config has a per-device
    # table (from_section)
    sub_batch_tokens: int | None = None
    # share of the image bank's renderings held out from training for validation
    val_images: float = _OPTIONAL["val_images"]
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields("train", self)  # types and ranges: the schema's
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"TrainConfig.precision={self.precision!r}; valid: 'fp32', 'bf16'")
        if self.sub_batch_tokens is not None and self.sub_batch_tokens < 1:
            raise ValueError(f"TrainConfig.sub_batch_tokens={self.sub_batch_tokens} must be >= 1 (or None)")
        if not 1 <= self.attempt <= self.attempts:
            raise ValueError(f"TrainConfig.attempt={self.attempt} must lie in 1..attempts={self.attempts}")

    @property
    def pass_bar(self) -> float | None:
        """The validation accuracy an attempt must reach to pass (vlbind.training.attempts): target_accuracy, else
        pass_accuracy; None: the stage cannot fail, so it is never retried."""
        return self.target_accuracy if self.target_accuracy is not None else self.pass_accuracy

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return from_dict(cls, d)

    @classmethod
    def from_section(cls, train: dict, seed: int, device: str, precision: str) -> TrainConfig:
        """From a (merged) config `train` section (params.stage_train) for a job on `device`, with the autocast
        precision already resolved for it (device.job_device, or precision_for). The section's per-device tables
        give `device`'s entry: `precision` is that resolved one, `sub_batch_tokens` its entry ('cuda:1' -> 'cuda')."""
        sub_batch_tokens = train.get("sub_batch_tokens", {}).get(device.split(":")[0])
        per_device = {"precision": precision, "sub_batch_tokens": sub_batch_tokens}
        return cls.from_dict({**train, "seed": seed, **per_device})


def attempt_count(meta: dict) -> int:
    """How many attempts a unit trained under the retry rule (training.attempts), from its meta.json or its entry in a
    ramp's `ramp` list; 1 for one made without the rule or where it did not apply."""
    listed = meta.get("attempts", 1)
    return len(listed) if isinstance(listed, list) else listed
