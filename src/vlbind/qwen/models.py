"""The pretrained Qwen LLMs and VLMs (paper, appendix B), loaded with transformers (tiny random stand-ins:
vlbind.qwen.tiny).

- A model is named by a Hugging Face repo id or a local directory. Its class comes from `config.model_type`
  (AutoModelForCausalLM has no mapping for the VL models): Qwen2 / Qwen2.5 text -> Qwen2ForCausalLM, Qwen3 ->
  Qwen3ForCausalLM, the VL models -> their ...ForConditionalGeneration. VL models take text-only inputs.
- Weights are only ever read locally (`local_files_only`): a repo that is not in the Hugging Face cache fails at
  once with `QwenWeightsError` naming the model and the ways out; nothing waits on the network.
- `decoder_layers(model)` is the one accessor analyses hook (`get_decoder().layers`, for every class).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from vlbind.core.settings import config_defaults, from_dict

CLASSES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen2_vl": "Qwen2VLForConditionalGeneration",
           "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration", "qwen3_vl": "Qwen3VLForConditionalGeneration"}


# The oldest transformers with every class above (Qwen3-VL: 4.57; 4.57.0 was yanked) and from_pretrained(dtype=);
# pyproject.toml and workflow/envs/vlbind.yaml require it too (tests hold the three equal).
MIN_TRANSFORMERS = "4.57.1"


class QwenWeightsError(RuntimeError):
    pass


@dataclass(frozen=True)
@config_defaults("qwen.models.*")
class QwenModel:
    repo: str  # Hugging Face repo id, or a local directory holding config.json and the weights
    model_type: str  # its config.model_type (Qwen2.5-7B-Instruct: "qwen2"); picks the class of `tiny` models too
    kind: str  # "llm" or "vlm"
    generation: str  # "Qwen2", "Qwen2.5", "Qwen3": the LLM / VLM pairs compared

    def __post_init__(self) -> None:
        if self.kind not in ("llm", "vlm"):
            raise ValueError(f"QwenModel.kind={self.kind!r}; valid: 'llm', 'vlm'")
        if self.model_type not in CLASSES:
            raise ValueError(f"QwenModel.model_type={self.model_type!r}; valid: {sorted(CLASSES)}")

    @classmethod
    def from_dict(cls, d: dict) -> QwenModel:
        return from_dict(cls, d)


def local_path(repo: str) -> str:
    """`repo` itself if it is a directory, else its snapshot in the Hugging Face cache; QwenWeightsError if neither."""
    if Path(repo).is_dir():
        return repo
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo, local_files_only=True)
    except Exception as e:  # not cached (huggingface_hub raises several kinds)
        hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
        raise QwenWeightsError(
            f"model {repo!r} is not available locally ({type(e).__name__}). Ways out:\n"
            f"  1. on a machine with internet: huggingface-cli download {repo}; then copy its Hugging Face cache "
            f"({hf_home}) here or point $HF_HOME at it;\n"
            f"  2. set the model's `repo` in the config's `qwen.models` to a local directory holding it;\n"
            "  3. set `qwen.tiny: true` for tiny random models (tests; the figures say so).") from None


def load(spec: QwenModel, dtype: str, device: str = "cpu"):
    """(model in eval mode, tokenizer) of `spec`, read from local files only, in `dtype` (config key qwen.dtype)."""
    import transformers

    path = local_path(spec.repo)
    config = transformers.AutoConfig.from_pretrained(path)
    if config.model_type != spec.model_type:
        raise ValueError(f"{spec.repo}: its config says model_type {config.model_type!r}, the vlbind config "
                         f"{spec.model_type!r}; fix `model_type` under qwen.models")
    model = getattr(transformers, CLASSES[config.model_type]).from_pretrained(path, dtype=getattr(torch, dtype))
    return model.to(device).eval(), transformers.AutoTokenizer.from_pretrained(path)


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder blocks, in order, for every supported class (text models and VL models alike)."""
    return model.get_decoder().layers
