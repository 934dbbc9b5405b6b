"""Dense supervision: every object of a context queried in one packed sequence (tasks.pack_queries).

Each packed query group must be exactly the single-query prompt of its object: same logits, same answer.
"""

from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_tasks import solve
from test_vision import make_bank, solve_image_prompt

from vlbind.core.vocab import VOCAB
from vlbind.data.batching import by_length
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import IMAGE, Role, assemble, generate, pack_queries, prompt_text
from vlbind.model.inference import answer_logits
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.losses import prompt_loss

TEXT_SPECS = {
    "retrieval": StageSpec(216, 216, 32, 2, 8, shuffle=True),
    "fixed_order": StageSpec(216, 216, 8, 2, 8, shuffle=False),
    "grounding": StageSpec(216, 216, 32, 2, 8, grounding_fraction=1.0),
    "symmetric": StageSpec(216, 216, 32, 2, 8, grounding_fraction=0.3, symmetric_fraction=0.5),
    "noise": StageSpec(216, 216, 32, 2, 8, symmetric_fraction=0.5, noise_tokens=100, noise_fraction=0.5),
    "one_hop_lookups": StageSpec(216, 216, 32, 2, 8, symmetric_fraction=0.5, lookup_fraction=0.5),
}
IMAGE_SPEC = StageSpec(8, 13, 8, 2, 8, grounding_fraction=0.5, symmetric_fraction=0.5, image_fraction=0.5)


def tiny() -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(n_layers=3, d_model=32, d_ff=64, n_heads=2)).eval()


def single_query(b, slot, bank=None):
    """The unpacked prompts of `b` (a generated batch) that query `slot` (B,), laid out from scratch."""
    B, P = b.colors.shape
    picture = np.full((B, P), -1, dtype=np.int64)
    r, t = np.nonzero(b.image_ids >= 0)
    if bank is not None and bank.layout == "canvas":
        picture[r, 0] = b.image_ids[r, t]
    else:
        picture[r, b.slots[r, t]] = b.image_ids[r, t]
    return assemble(n=b.n_objects, colors=b.colors, shapes=b.shapes, items=b.items, entry_slots=b.association_slots,
                    query_slot=slot, kind=b.kind, query_by=b.query_by, gap=b.noise, modality=b.modality,
                    picture=picture, bank=bank)


def unpack(packed, p):
    """Block p of every packed prompt as a single-query batch: the shared prefix, then block p's tokens."""
    B, T = packed.tokens.shape
    keep = (packed.groups < 0) & (packed.roles != Role.PAD) | (packed.groups == p)
    order = np.argsort(~keep, axis=1, kind="stable")  # kept positions first, in order
    fields = {k: np.take_along_axis(getattr(packed, k), order, 1)
              for k in ("tokens", "positions", "roles", "slots", "image_ids", "patches")}
    fields["tokens"] = np.where(np.take_along_axis(keep, order, 1), fields["tokens"], VOCAB.pad)
    return replace(packed, **fields, answer_pos=keep.sum(1) - 1, target=packed.target[:, p],
                   query_slot=packed.query_slot[:, p], groups=None)


def cases(tmp_path):
    rng = np.random.default_rng(7)
    for name, spec in TEXT_SPECS.items():
        yield name, generate(spec, 48, rng), None
    for layout in ("per_object", "canvas"):
        bank = make_bank(tmp_path, layout, dim=6)
        yield layout, generate(IMAGE_SPEC, 48, rng, bank=bank), bank


def test_every_packed_block_gives_the_single_query_prompts_logits(tmp_path):
    for name, b, bank in cases(tmp_path):
        model = tiny()
        if bank is not None:
            model.attach_projector(6, mult=1.0)
        with torch.no_grad():
            packed = answer_logits(model, pack_queries(b), "cpu", bank=bank)
            for p in range(b.colors.shape[1]):
                has = b.n_objects > p
                single = answer_logits(model, single_query(b, np.where(has, p, 0), bank), "cpu", bank=bank)
                torch.testing.assert_close(packed[has, p], single[has], atol=1e-5, rtol=0, msg=name)


def test_every_block_target_is_recomputed_from_its_own_tokens(tmp_path):
    for name, b, bank in cases(tmp_path):
        pb = pack_queries(b)
        assert ((pb.target >= 0) == (np.arange(pb.target.shape[1]) < b.n_objects[:, None])).all(), name
        for p in range(pb.target.shape[1]):
            u = unpack(pb, p)
            for i in np.flatnonzero(b.n_objects > p):
                if u.modality[i] == IMAGE:
                    assert solve_image_prompt(u, i, bank.objects) == u.target[i], name
                else:
                    assert solve(prompt_text(u, i)) == VOCAB.tokens[u.target[i]], name
                assert u.slots[i, u.answer_pos[i] - 1] == p  # the query names slot p


def test_a_packed_solo_context_prompt_gives_its_single_query_prompts_logits():
    """A solo-context prompt (the context shows the queried object alone) packs to one group: itself."""
    spec = StageSpec(216, 216, 8, 2, 8, symmetric_fraction=0.5, solo_fraction=1.0, noise_tokens=100,
                     noise_fraction=0.5)
    b = generate(spec, 32, np.random.default_rng(9))
    model = tiny()
    with torch.no_grad():
        packed = answer_logits(model, pack_queries(b), "cpu")
        single = answer_logits(model, b, "cpu")
    assert packed.shape[1] == 1
    torch.testing.assert_close(packed[:, 0], single, atol=1e-5, rtol=0)


def test_a_block_sees_the_prefix_and_itself_only():
    """Changing another block's query token changes nothing in this block's logits; the prefix does."""
    b = pack_queries(generate(TEXT_SPECS["retrieval"], 8, np.random.default_rng(2), n_objects=4))
    model = tiny()
    other = b.tokens.copy()
    other[:, b.answer_pos[:, 1] - 1] = VOCAB.color_offset  # block 1's query
    with torch.no_grad():
        base = answer_logits(model, b, "cpu")
        changed = answer_logits(model, replace(b, tokens=other), "cpu")
    torch.testing.assert_close(changed[:, [0, 2, 3]], base[:, [0, 2, 3]], atol=0, rtol=0)
    assert not torch.allclose(changed[:, 1], base[:, 1])


def test_one_object_prompts_pack_to_themselves():
    b = generate(StageSpec(216, 216, 32, 1, 1, symmetric_fraction=0.5), 16, np.random.default_rng(3))
    pb = pack_queries(b)
    for k in ("tokens", "positions", "roles", "slots"):
        np.testing.assert_array_equal(getattr(pb, k), getattr(b, k))
    np.testing.assert_array_equal(pb.answer_pos[:, 0], b.answer_pos)
    np.testing.assert_array_equal(pb.target[:, 0], b.target)


def test_packed_answer_logits_equal_the_full_forward_at_every_answer():
    """The last block runs at the answer positions only; that must be what the full forward gives there."""
    b = pack_queries(generate(TEXT_SPECS["noise"], 8, np.random.default_rng(4)))
    model = tiny()
    with torch.no_grad():
        full = model(torch.from_numpy(b.tokens), torch.from_numpy(b.positions), groups=torch.from_numpy(b.groups))
        got = answer_logits(model, b, "cpu")
    has = b.answer_pos >= 0
    r, q = np.nonzero(has)
    torch.testing.assert_close(got[r, q], full[r, b.answer_pos[r, q]])


def test_prompt_loss_weighs_every_prompt_the_same():
    """A naive loop: each prompt's mean over its labels, then the mean over prompts."""
    torch.manual_seed(0)
    logits = torch.randn(5, 4, 11)
    target = np.array([[1, -1, -1, -1], [2, 3, -1, -1], [0, 1, 2, 3], [4, 4, 4, -1], [10, -1, -1, -1]])
    naive = np.mean([np.mean([F.cross_entropy(logits[i, q], torch.tensor(t)).item()
                              for q, t in enumerate(row) if t >= 0]) for i, row in enumerate(target)])
    assert prompt_loss(logits, target).item() == pytest.approx(naive, rel=1e-6)



@pytest.mark.parametrize("solo", [0.0, 0.5])
def test_by_length_cuts_only_padding_and_keeps_every_prompt(solo):
    """Against the packed batch itself: the sub-batches hold each of its prompts once, shortest first, each
    prompt's tokens and query groups whole."""
    spec = replace(TEXT_SPECS["retrieval"], solo_fraction=solo)
    b = pack_queries(generate(spec, 40, np.random.default_rng(5)))
    parts = by_length(b, 300)
    lengths = [(p.roles != Role.PAD).sum(1) for p in parts]
    assert len(parts) > 2 and all(len(p) * length.max() <= 300 for p, length in zip(parts, lengths))
    assert all(np.diff(np.concatenate(lengths)) >= 0)
    assert [len(p) for p in by_length(b, 1)] == [1] * len(b)
    seen = []
    for part, length in zip(parts, lengths):
        assert part.tokens.shape[1] == length.max() and part.groups.shape == part.tokens.shape
        assert part.answer_pos.shape[1] == (part.answer_pos >= 0).sum(1).max()
        for i in range(len(part)):
            j = int(np.nonzero((b.tokens == np.pad(part.tokens[i], (0, b.tokens.shape[1] - length.max()),
                                                 constant_values=VOCAB.pad)).all(1)
                               & (b.colors == part.colors[i]).all(1))[0][0])
            seen.append(j)
            q = part.answer_pos.shape[1]
            assert (b.answer_pos[j, q:] == -1).all() and np.array_equal(part.answer_pos[i], b.answer_pos[j, :q])
            assert np.array_equal(part.target[i], b.target[j, :q])
    assert sorted(seen) == list(range(len(b)))


@pytest.mark.parametrize("binding_loss", [0.0, 1.0])
def test_a_step_on_sub_batches_gives_the_whole_batchs_loss_and_gradients(tmp_path, binding_loss):
    """train.sub_batch_tokens: the loss and every gradient of a batch run as length-sorted sub-batches against the same
    batch run whole, on text and image prompts, with solo practice and the binding loss."""
    from vlbind.training.config import TrainConfig
    from vlbind.training.loop import _step
    from vlbind.training.optim import make_optimizer

    cfg = TrainConfig(queries="all", binding_loss=binding_loss, warmup_steps=1)
    solo = generate(replace(TEXT_SPECS["retrieval"], solo_fraction=0.5), 48, np.random.default_rng(8))
    for name, batch, bank in [*cases(tmp_path), ("solo", solo, None)]:
        packed = pack_queries(batch)
        got = {}
        for sub in (None, 200):
            model = tiny().train()
            if bank is not None:
                model.attach_projector(6, mult=1.0)
            opt = make_optimizer(model, cfg)  # the step leaves the gradients it took
            loss, norm, _ = _step(model, model, opt, packed, replace(cfg, sub_batch_tokens=sub), 1, "cpu", bank)
            got[sub] = loss, norm, [p.grad.clone() for p in model.parameters()]
        torch.testing.assert_close(got[200][0], got[None][0], msg=name)
        torch.testing.assert_close(got[200][1], got[None][1], msg=name)
        for g_sub, g in zip(got[200][2], got[None][2]):
            torch.testing.assert_close(g_sub, g, atol=1e-6, rtol=1e-4, msg=name)
