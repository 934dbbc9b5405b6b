"""Qwen models (vlbind.qwen.models) on tiny random models built offline: the layer accessor against
`output_hidden_states`, loading a saved model through the real path, and the fail-fast message."""

import time

import pytest
import torch

from vlbind.qwen.binding import make_pairs
from vlbind.qwen.models import CLASSES, QwenModel, QwenWeightsError, decoder_layers, load
from vlbind.qwen.probes import make_prompt
from vlbind.qwen.prompts import Chat, PromptConfig, prompts
from vlbind.qwen.tiny import tiny

TYPES = sorted(CLASSES)


def chat_ids(tok, task="indirect"):
    texts = {"binding": make_pairs(6, 1, seed=0)[0].original,
             "probes": make_prompt(__import__("numpy").random.default_rng(0), 4).text}
    text = texts.get(task) or prompts(PromptConfig(context_lengths=(4,), contexts_per_length=1), task)[0].text
    return tok(Chat().render(tok, text), return_tensors="pt", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("model_type", TYPES)
def test_residuals_read_by_layer_hooks_equal_output_hidden_states(model_type):
    """hidden_states[i] is the stream entering decoder layer i (the last entry is after the final norm)."""
    model, tok = tiny(model_type)
    seen = []

    def grab(module, args, kwargs):
        seen.append((args[0] if args else kwargs["hidden_states"]).detach().clone())

    handles = [layer.register_forward_pre_hook(grab, with_kwargs=True) for layer in decoder_layers(model)]
    try:
        with torch.no_grad():
            out = model(input_ids=chat_ids(tok), output_hidden_states=True)
    finally:
        for h in handles:
            h.remove()
    assert len(seen) == 2 == len(out.hidden_states) - 1
    for i, x in enumerate(seen):
        torch.testing.assert_close(x, out.hidden_states[i])


@pytest.mark.parametrize("model_type", TYPES)
def test_a_saved_model_loads_through_the_real_path_with_the_same_logits(model_type, tmp_path):
    model, tok = tiny(model_type)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, _ = load(QwenModel(str(tmp_path), model_type, "vlm" if "vl" in model_type else "llm", "Qwen2"), "float32")
    assert type(loaded) is type(model) and (tmp_path / "model.safetensors").is_file()
    ids = chat_ids(tok)  # (a saved tiny qwen2 tokenizer reloads as Qwen2Tokenizer; real repos ship their own)
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits)


def test_tiny_models_are_seeded_and_the_tokenizer_knows_every_prompt_word():
    a, tok = tiny("qwen2_vl", seed=3)
    b, _ = tiny("qwen2_vl", seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    for task in ("direct", "indirect", "binding", "probes"):
        assert not (chat_ids(tok, task) == tok.unk_token_id).any(), task
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


def test_missing_weights_fail_at_once_naming_the_model(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    t0 = time.time()
    with pytest.raises(QwenWeightsError, match="Qwen/Qwen2-VL-7B-Instruct") as e:
        load(QwenModel("Qwen/Qwen2-VL-7B-Instruct", "qwen2_vl", "vlm", "Qwen2"), "bfloat16")
    assert time.time() - t0 < 1 and "qwen.tiny" in str(e.value) and "HF_HOME" in str(e.value)


def test_a_qwen_job_stops_before_loading_on_an_old_transformers_and_on_a_tokenizer_without_chat_template(
        monkeypatch):
    import re
    from pathlib import Path

    from vlbind.qwen import jobs
    from vlbind.qwen.models import MIN_TRANSFORMERS

    spec = QwenModel("Qwen/Qwen3-8B", "qwen3", "llm", "Qwen3")
    model, tok = jobs.for_job(spec, True, "float32", "cpu")  # the stand-in passes
    tok.chat_template = None
    with pytest.raises(jobs.QwenJobError, match=r"Qwen/Qwen3-8B: its tokenizer has no chat template.*-Instruct"):
        jobs.preflight(spec, tok)
    monkeypatch.setattr(jobs, "transformers_version", lambda: "4.56.2")
    with pytest.raises(jobs.QwenJobError, match=re.escape(f"transformers>={MIN_TRANSFORMERS}")):
        jobs.for_job(spec, True, "float32", "cpu")
    root = Path(__file__).resolve().parents[1]
    for f in ("pyproject.toml", "workflow/envs/vlbind.yaml"):  # the floor, stated once more where pip reads it
        assert f"transformers>={MIN_TRANSFORMERS}" in (root / f).read_text(), f
