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

from vlbind.inference import answer_logits
from vlbind.model import ModelConfig, Transformer
from vlbind.tasks import IMAGE, Role, StageSpec, assemble, generate, pack_queries, prompt_text
from vlbind.train import prompt_loss
from vlbind.vocab import VOCAB

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

