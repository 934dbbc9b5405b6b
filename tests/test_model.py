"""The Table 2 transformer: size, RoPE, hooks, and noise realised as position jumps."""

import math
import warnings

import numpy as np
import pytest
import torch

from vlbind.data.spec import StageSpec
from vlbind.data.tasks import Role, generate
from vlbind.model.hooks import cache_hook, knockout_hook, patch_hook, skip_block_hooks
from vlbind.model.transformer import ModelConfig, Transformer, count_parameters, rope

TINY = ModelConfig(n_layers=3, d_model=32, d_ff=64, n_heads=2, vocab_size=500)


@pytest.fixture
def tiny():
    torch.manual_seed(0)
    return Transformer(TINY).eval()


def test_table2_parameter_count_and_shapes():
    cfg = ModelConfig()
    m = Transformer(cfg)
    d, f, L, V = 128, 512, 12, 1000
    per_block = 4 * d * d + 2 * d * f + 2 * 2 * d  # qkv + out, up + down, two LayerNorms (weight + bias)
    assert count_parameters(m) == L * per_block + 2 * V * d + 2 * d
    assert (cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.vocab_size) == (12, 128, 512, 4, 1000)
    tokens = torch.randint(0, 470, (3, 17))
    assert m(tokens).shape == (3, 17, 1000)
    assert not any(isinstance(x, torch.nn.Dropout) for x in m.modules())


def test_rope_rotates_interleaved_pairs_by_position_times_frequency(tiny):
    """Against a plain loop: pair (2i, 2i+1) at position p turns by p * base^(-2i/Dh)."""
    torch.manual_seed(1)
    Dh = TINY.d_model // TINY.n_heads
    x = torch.randn(2, 5, Dh)
    pos = torch.tensor([[0, 1, 2, 7, 100], [3, 3, 4, 9, 11]])
    got = rope(x, tiny.rope_cis[pos])
    expected = torch.empty_like(x)
    for b in range(2):
        for t in range(5):
            for i in range(Dh // 2):
                a = pos[b, t].item() * TINY.rope_base ** (-2 * i / Dh)
                x0, x1 = x[b, t, 2 * i].item(), x[b, t, 2 * i + 1].item()
                expected[b, t, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
                expected[b, t, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_only_on_relative_position(tiny):
    torch.manual_seed(2)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)

    def score(m, n):
        return (rope(q, tiny.rope_cis[m]) * rope(k, tiny.rope_cis[n])).sum()

    base = score(7, 3)
    for shift in (1, 50, 1000):
        torch.testing.assert_close(score(7 + shift, 3 + shift), base, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(score(9, 3), base)


def test_noop_hooks_change_nothing_bit_for_bit(tiny):
    tokens = torch.randint(0, 470, (4, 21))
    plain = tiny(tokens)
    names = [n for n in tiny.hook_points() if "attn." not in n]
    with tiny.hooks([(n, lambda x, name: None) for n in names] + [(n, lambda x, name: x) for n in names]):
        hooked = tiny(tokens)
    assert torch.equal(plain, hooked)


def test_explicit_attention_path_matches_sdpa(tiny):
    tokens = torch.randint(0, 470, (4, 21))
    plain = tiny(tokens)
    with tiny.hooks([(f"blocks.{i}.attn.hook_pattern", lambda x, n: None) for i in range(3)]):
        explicit = tiny(tokens)
    torch.testing.assert_close(explicit, plain, atol=1e-5, rtol=1e-5)


def test_cpu_bf16_autocast_runs_linears_in_bf16_and_attention_in_float32(tiny):
    """bf16 autocast on CPU: the projections are bf16, the attention itself float32 (the CPU bf16
    flash-attention backward is slow, see model/transformer.py), and the result stays close to a float32 run."""
    tokens = torch.randint(0, 470, (4, 21))
    store = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with tiny.hooks([("blocks.1.attn.hook_k", cache_hook(store)), ("blocks.1.hook_attn_out", cache_hook(store))]):
            fast = tiny(tokens)
        with tiny.hooks([(f"blocks.{i}.attn.hook_pattern", lambda x, n: None) for i in range(3)]):
            explicit = tiny(tokens)
    assert store["blocks.1.attn.hook_k"].dtype == torch.float32
    assert store["blocks.1.hook_attn_out"].dtype == torch.bfloat16  # the output projection ran in bf16
    torch.testing.assert_close(explicit, fast, atol=1e-5, rtol=1e-5)  # same precision in both attention paths
    reference = tiny(tokens)
    assert fast.dtype == torch.bfloat16
    assert (fast.float() - reference).abs().max() < 0.05 * reference.abs().max()


def test_a_model_cast_to_bf16_keeps_its_rope_table_and_matches_float32(tiny):
    """Casting a model (no autocast) casts its weights, not the complex RoPE table: the cast model computes
    the float32 model's logits up to bf16 rounding, and moving it keeps the table's dtype."""
    tokens = torch.randint(0, 470, (4, 21))
    reference = tiny(tokens)
    as_bf16 = Transformer(TINY).eval()
    as_bf16.load_state_dict(tiny.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch warns when a cast drops imaginary parts
        as_bf16.to(torch.bfloat16)
    assert as_bf16.rope_cis.dtype == torch.complex64 and as_bf16.embed.weight.dtype == torch.bfloat16
    out = as_bf16(tokens)
    assert out.dtype == torch.bfloat16
    assert (out.float() - reference).abs().max() < 0.05 * reference.abs().max()
    assert as_bf16.float().to("cpu").rope_cis.dtype == torch.complex64
    torch.testing.assert_close(as_bf16(tokens), tiny(tokens), atol=0.05, rtol=0.05)


def test_hooks_are_removed_after_an_exception(tiny):
    with pytest.raises(RuntimeError):
        with tiny.hooks([("blocks.0.hook_resid_pre", lambda x, n: x * 0)]):
            raise RuntimeError("boom")
    assert all(not p.fns for p in tiny.hook_points().values())
    with pytest.raises(KeyError, match="no hook point"):
        with tiny.hooks([("blocks.0.resid_pre", lambda x, n: x)]):
            pass


def test_cache_patch_and_skip(tiny):
    a, b = torch.randint(0, 470, (2, 9)), torch.randint(0, 470, (2, 9))
    store = {}
    with tiny.hooks([("blocks.0.hook_resid_pre", cache_hook(store))]):
        logits_b = tiny(b)
    rows = torch.arange(2).repeat_interleave(9)
    pos = torch.arange(9).repeat(2)
    with tiny.hooks([("blocks.0.hook_resid_pre", patch_hook(rows, pos, store["blocks.0.hook_resid_pre"][rows, pos]))]):
        patched = tiny(a)
    assert torch.equal(patched, logits_b)  # patching every position entering block 0 is running b
    with tiny.hooks(skip_block_hooks(1)):
        skipped = tiny(a)
    manual = tiny.embed(a)
    T = a.shape[1]
    cis = tiny.rope_cis[:T][None, :, None, None]
    for i in (0, 2):
        manual = tiny.blocks[i](manual, cis)
    torch.testing.assert_close(skipped, tiny.logits(manual))


def test_causal_so_right_padding_is_harmless(tiny):
    a = torch.randint(0, 470, (1, 12))
    b = a.clone()
    b[0, 8:] = 0
    torch.testing.assert_close(tiny(a)[:, :8], tiny(b)[:, :8])


def test_residual_at_one_position_per_prompt_equals_the_full_stream_there(tiny):
    """`at` skips the last block's work at every other position; hooks on that block see every position."""
    b = generate(StageSpec(8, 8, 8, 2, 6, shuffle=True), 16, np.random.default_rng(0))  # right-padded
    tokens, positions = torch.from_numpy(b.tokens), torch.from_numpy(b.positions)
    at = torch.from_numpy(b.answer_pos)
    assert len(set(b.answer_pos.tolist())) > 1
    full = tiny.residual(tokens, positions)[torch.arange(16), at]
    torch.testing.assert_close(tiny.residual(tokens, positions, at=at), full)
    for name in ("blocks.2.hook_resid_post", "blocks.2.attn.hook_pattern", "blocks.1.hook_resid_post"):
        seen = {}
        with tiny.hooks([(name, cache_hook(seen))]):
            hooked = tiny.residual(tokens, positions, at=at)
        assert seen[name].shape[2 if "pattern" in name else 1] == tokens.shape[1], name
        torch.testing.assert_close(hooked, full, rtol=0, atol=1e-6)


def test_noise_jumps_equal_materialised_fully_masked_noise(tiny):
    spec = StageSpec(216, 216, 32, 2, 6, noise_tokens=100, noise_fraction=1.0, grounding_fraction=0.3)
    jumps = generate(spec, 8, np.random.default_rng(0))
    mat = generate(spec, 8, np.random.default_rng(0), materialize_noise=True)
    logits_jump = tiny(torch.from_numpy(jumps.tokens), torch.from_numpy(jumps.positions))
    is_noise = torch.from_numpy(mat.roles == Role.NOISE)
    T = is_noise.shape[1]
    blocked = is_noise[:, None, :].expand(-1, T, -1)  # nobody attends to a noise token
    hooks = [(f"blocks.{i}.attn.hook_attn_scores", knockout_hook(blocked)) for i in range(TINY.n_layers)]
    with tiny.hooks(hooks):
        logits_mat = tiny(torch.from_numpy(mat.tokens), torch.from_numpy(mat.positions))
    for i in range(8):
        L = jumps.answer_pos[i] + 1
        real = torch.from_numpy(jumps.positions[i, :L])
        torch.testing.assert_close(logits_mat[i, real], logits_jump[i, :L], atol=1e-5, rtol=1e-5)


def test_position_beyond_table_is_a_clear_error(tiny):
    with pytest.raises(ValueError, match="max_positions"):
        tiny(torch.zeros(1, 2, dtype=torch.long), torch.tensor([[0, 10**6]]))


def test_answer_logits_checks_positions_on_the_host(tiny):
    """The check answer_logits makes from the batch's numpy positions (on CUDA, the model's own would wait for
    the device): a position beyond the table is the same clear error."""
    from vlbind.model.inference import answer_logits

    batch = generate(StageSpec(8, 8, 8, 2, 2), 2, np.random.default_rng(0))
    batch.positions[0, -1] = TINY.max_positions
    with pytest.raises(ValueError, match="max_positions"):
        answer_logits(tiny, batch, "cpu")


def test_every_attention_call_runs_with_cudnn_attention_switched_off(tiny, monkeypatch):
    """On H100/H200 cuDNN's SDPA backward returns NaN for a masked key length of 64 mod 128 (pytorch/pytorch#196678;
    model.SDPA_BACKENDS). A CPU cannot run that kernel, but it can see which kernels each call allows: every
    attention the model runs (a packed training step and its backward, validation, a plain forward, a KV-cache
    extension) allows flash, efficient and math attention and not cuDNN, and the switch is scoped to the call."""
    from vlbind.data.tasks import pack_queries
    from vlbind.model.inference import accuracy
    from vlbind.training.config import TrainConfig
    from vlbind.training.losses import training_loss

    backends = torch.backends.cuda
    calls, phase = [], ["training"]
    original = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append({"phase": phase[0], "masked": kwargs.get("attn_mask") is not None,
                      "cudnn": backends.cudnn_sdp_enabled(), "others": (backends.flash_sdp_enabled(),
                                                                        backends.mem_efficient_sdp_enabled(),
                                                                        backends.math_sdp_enabled())})
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    spec, rng = StageSpec(8, 8, 8, 2, 4, shuffle=True), np.random.default_rng(0)
    batch = generate(spec, 4, rng)
    tiny.train()
    training_loss(tiny, pack_queries(batch), TrainConfig(queries="all"), "cpu").backward()
    phase[0] = "validation"
    accuracy(tiny.eval(), [batch], "cpu")
    phase[0] = "forward"
    tokens = torch.from_numpy(batch.tokens)
    names = [f"blocks.{i}.attn.hook_{kv}" for kv in "kv" for i in range(TINY.n_layers)]
    _, cache = tiny.residual_with_cache(names, tokens)
    B, T = tokens.shape
    phase[0] = "cache"
    tiny.extend(tiny.embed(tokens[:, :2]), torch.arange(T, T + 2).expand(B, 2),
                [cache[f"blocks.{i}.attn.hook_k"] for i in range(TINY.n_layers)],
                [cache[f"blocks.{i}.attn.hook_v"] for i in range(TINY.n_layers)], torch.ones(B, T, dtype=torch.bool))
    masked = {c["phase"] for c in calls if c["masked"]}
    assert masked == {"training", "validation", "cache"} and {c["phase"] for c in calls} == masked | {"forward"}
    assert all(not c["cudnn"] and c["others"] == (True, True, True) for c in calls)
    assert backends.cudnn_sdp_enabled()  # outside the model's calls, PyTorch's own setting is back


def test_the_smallest_vocab_size_the_config_accepts_embeds_every_token_an_image_prompt_holds(tmp_path):
    """model.vocab_size's lower bound is the vocabulary's size, [IMAGE] included (its last id): a bound one below
    it validated a model that failed on its first image batch."""
    from pathlib import Path

    from test_vision import make_bank

    from vlbind import config as vlconfig
    from vlbind.core.vocab import VOCAB
    from vlbind.model.inference import answer_logits

    root = Path(__file__).resolve().parents[1]
    base = vlconfig.load([root / "config/config.yaml"])
    with pytest.raises(vlconfig.ConfigError, match=r"model\.vocab_size"):
        vlconfig.validate({**base, "model": {**base["model"], "vocab_size": len(VOCAB) - 1}})
    smallest = {**base["model"], "vocab_size": len(VOCAB), "n_layers": 1, "d_model": 16, "d_ff": 16, "n_heads": 2}
    vlconfig.validate({**base, "model": smallest})
    model = Transformer(ModelConfig(**smallest)).attach_projector(6)
    bank = make_bank(tmp_path, "per_object", dim=6)
    spec = StageSpec(n_colors=8, n_shapes=13, n_items=8, max_objects=3, image_fraction=1.0)
    batch = generate(spec, 4, np.random.default_rng(0), bank=bank)
    assert (batch.tokens == VOCAB.image).any()
    assert answer_logits(model, batch, "cpu", bank=bank).shape == (4, len(VOCAB))
