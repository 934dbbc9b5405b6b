"""What a Qwen rule runs on: its model (the tiny stand-in of its class, or the real weights) and the model
columns every Qwen result table starts with."""

from __future__ import annotations

from .models import QwenModel, load
from .tiny import tiny


def for_job(spec: QwenModel, tiny_model: bool, dtype: str, device: str):
    """(model on `device`, tokenizer) a Qwen rule runs: the tiny stand-in of its class (`qwen.tiny`) or the
    real weights."""
    model, tok = tiny(spec.model_type) if tiny_model else load(spec, dtype, device)
    return model.to(device), tok


def with_model_columns(table, name: str, spec: QwenModel, tiny_model: bool, **extra):
    """`table` with the model's name, generation, kind, tiny flag (and `extra` columns) first, as every Qwen
    result table has them."""
    for i, (key, value) in enumerate({"model": name, "generation": spec.generation, "kind": spec.kind,
                                      "tiny": tiny_model, **extra}.items()):
        table.insert(i, key, value)
    return table
