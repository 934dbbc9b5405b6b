"""What a Qwen rule runs on: its model (the tiny stand-in of its class, or the real weights) and the model
columns every Qwen result table starts with."""

from __future__ import annotations

import logging

from vlbind.qwen.models import MIN_TRANSFORMERS, QwenModel, load
from vlbind.qwen.tiny import tiny


class QwenJobError(RuntimeError):
    pass


def transformers_version() -> str:
    from importlib.metadata import version

    return version("transformers")


def preflight(spec: QwenModel, tokenizer=None) -> None:
    """What a Qwen job checks before it spends time: a transformers release with every class of qwen.models and
    the keywords vlbind passes (MIN_TRANSFORMERS), and, once loaded, a tokenizer with a chat template (every
    analysis renders its prompts with it). Raises QwenJobError naming the model and the fix."""
    from packaging.version import Version

    if Version(transformers_version()) < Version(MIN_TRANSFORMERS):
        raise QwenJobError(f"transformers {transformers_version()} is too old for {spec.repo} and the other Qwen "
                           f"models (Qwen3-VL's class, `dtype=`): pip install 'transformers>={MIN_TRANSFORMERS}'")
    if tokenizer is not None and not getattr(tokenizer, "chat_template", None):
        raise QwenJobError(f"{spec.repo}: its tokenizer has no chat template, and every Qwen analysis renders its "
                           "prompts with one. Use the chat release (e.g. Qwen/Qwen2-7B-Instruct, not the base "
                           "model) or a local copy whose tokenizer files hold the template (tokenizer_config.json's "
                           "chat_template or chat_template.jinja)")


def for_job(spec: QwenModel, tiny_model: bool, dtype: str, device: str):
    """(model on `device`, tokenizer) a Qwen rule runs: the tiny stand-in of its class (`qwen.tiny`) or the
    real weights, after the preflight checks."""
    preflight(spec)
    model, tok = tiny(spec.model_type) if tiny_model else load(spec, dtype, device)
    preflight(spec, tok)
    logging.getLogger("vlbind").info("%s: %s weights%s", spec.repo, str(model.dtype).removeprefix("torch."),
                                     " (tiny random stand-in)" if tiny_model else "")
    return model.to(device), tok


def with_model_columns(table, name: str, spec: QwenModel, tiny_model: bool, **extra):
    """`table` with the model's name, generation, kind, tiny flag (and `extra` columns) first, as every Qwen
    result table has them."""
    for i, (key, value) in enumerate({"model": name, "generation": spec.generation, "kind": spec.kind,
                                      "tiny": tiny_model, **extra}.items()):
        table.insert(i, key, value)
    return table
