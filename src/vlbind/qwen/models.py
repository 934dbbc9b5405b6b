"""The pretrained Qwen LLMs and VLMs (paper, appendix B), loaded with transformers, and tiny random stand-ins.

- A model is named by a Hugging Face repo id or a local directory. Its class comes from `config.model_type`
  (AutoModelForCausalLM has no mapping for the VL models): Qwen2 / Qwen2.5 text -> Qwen2ForCausalLM, Qwen3 ->
  Qwen3ForCausalLM, the VL models -> their ...ForConditionalGeneration. VL models take text-only inputs.
- Weights are only ever read locally (`local_files_only`): a repo that is not in the Hugging Face cache fails at
  once with `QwenWeightsError` naming the model and the ways out; nothing waits on the network.
- `decoder_layers(model)` is the one accessor analyses hook (`get_decoder().layers`, for every class).
- `tiny(model_type)`: a 2-layer, hidden-64 model of that class with random weights (seeded) and `tiny_tokenizer()`,
  a word-level tokenizer built in code with a ChatML chat template: the tests and `qwen.tiny: true` run the
  whole sub-DAG with them, offline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ..settings import from_dict
from .words import BOX_OBJECTS, CITIES, COLOR_WORDS, FOODS, ITEM_WORDS, NAMES, SHAPE_WORDS

CLASSES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen2_vl": "Qwen2VLForConditionalGeneration",
           "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration", "qwen3_vl": "Qwen3VLForConditionalGeneration"}
CONFIGS = {"qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "qwen2_vl": "Qwen2VLConfig",
           "qwen2_5_vl": "Qwen2_5_VLConfig", "qwen3_vl": "Qwen3VLConfig"}
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


class QwenWeightsError(RuntimeError):
    pass


@dataclass(frozen=True)
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


def load(spec: QwenModel, dtype: str = "bfloat16", device: str = "cpu"):
    """(model in eval mode, tokenizer) of `spec`, read from local files only."""
    import transformers

    path = local_path(spec.repo)
    config = transformers.AutoConfig.from_pretrained(path)
    if config.model_type != spec.model_type:
        raise ValueError(f"{spec.repo}: its config says model_type {config.model_type!r}, the vlbind config "
                         f"{spec.model_type!r}; fix `model_type` under qwen.models")
    model = getattr(transformers, CLASSES[config.model_type]).from_pretrained(path, dtype=getattr(torch, dtype))
    return model.to(device).eval(), transformers.AutoTokenizer.from_pretrained(path)


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


def decoder_layers(model) -> torch.nn.ModuleList:
    """The decoder blocks, in order, for every supported class (text models and VL models alike)."""
    return model.get_decoder().layers


def tiny_tokenizer():
    """A word-level tokenizer over the retrieval prompts' vocabulary, with ChatML specials and template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ("Context Question In what city does live Where the person that likes Answer with just name City lives "
             "in is liked by You are a helpful assistant system user assistant the The and is Box Which box "
             "Associations item goes shape").split()
    specials = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    symbols = list(". , ? : ! ' \"".split()) + ["\n"] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    pools = list(NAMES + CITIES + FOODS + BOX_OBJECTS + COLOR_WORDS + SHAPE_WORDS + ITEM_WORDS)
    vocab = {w: i for i, w in enumerate(dict.fromkeys(specials + symbols + words + pools))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<|im_end|>",
                                  pad_token="<|endoftext|>", additional_special_tokens=specials[2:])
    tok.chat_template = CHATML
    return tok


def tiny(model_type: str, seed: int = 0):
    """(model, tokenizer): a tiny random model of `model_type`'s class (2 layers, hidden 64), seeded."""
    import transformers

    if model_type not in CLASSES:
        raise ValueError(f"unknown Qwen model_type {model_type!r}; valid: {sorted(CLASSES)}")
    tok = tiny_tokenizer()
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, bos_token_id=None,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)
    config_cls = getattr(transformers, CONFIGS[model_type])
    if model_type.endswith("_vl"):
        rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]}  # sums to head_dim / 2
        config = config_cls(text_config={**text, "rope_parameters": rope},
                            vision_config=dict(depth=1, embed_dim=32, hidden_size=64, out_hidden_size=64, num_heads=2))
    else:
        config = config_cls(**text)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, CLASSES[model_type])(config)
    return model.eval(), tok
