"""The binding loss (train.binding_loss, not in the paper): at each association item of a retrieval prompt,
the attribute a query names for the item's object. Targets are recomputed from the prompt's text (or, for
image contexts, from the bank's object table); the loss from a full forward pass."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_dense import IMAGE_SPEC, TEXT_SPECS, tiny
from test_vision import make_bank

from vlbind.core.vocab import VOCAB
from vlbind.data.tasks import GROUNDING, IMAGE, Role, generate, pack_queries
from vlbind.training.config import TrainConfig
from vlbind.training.losses import binding_targets, prompt_loss, training_loss


def expected_bindings(b, i, objects=None) -> list[tuple[int, int]]:
    """(item position, target token) of prompt i: the token paired in the context with the key before it."""
    if b.kind[i] == GROUNDING:
        return []
    roles, tokens = b.roles[i], b.tokens[i]
    if objects is None or b.modality[i] != IMAGE:  # text context: color shape color shape ...
        ctx = tokens[np.isin(roles, (Role.CONTEXT_COLOR, Role.CONTEXT_SHAPE))].reshape(-1, 2)
    else:  # image context: each image's object, from the table
        table = objects.set_index("image")
        images = list(dict.fromkeys(b.image_ids[i, roles == Role.CONTEXT_IMAGE].tolist()))
        ctx = np.array([(VOCAB.color_offset + table.loc[m, "color"] - 1, VOCAB.shape_offset + table.loc[m, "shape"] - 1)
                        for m in images])
    partner = {int(c): int(s) for c, s in ctx} | {int(s): int(c) for c, s in ctx}
    items = np.flatnonzero(roles == Role.ASSOCIATION_ITEM)
    return [(int(t), partner[int(tokens[t - 1])]) for t in items]


def got_bindings(pos, target, i) -> list[tuple[int, int]]:
    keep = pos[i] >= 0
    return list(zip(pos[i][keep].tolist(), target[i][keep].tolist()))


@pytest.mark.parametrize("name", ["retrieval", "symmetric", "noise", "grounding"])
def test_binding_targets_are_recomputed_from_the_prompt_text(name):
    b = generate(TEXT_SPECS[name], 64, np.random.default_rng(3))
    pos, target = binding_targets(b)
    for i in range(len(b)):
        assert got_bindings(pos, target, i) == expected_bindings(b, i)
    packed = pack_queries(b)  # the association list is in the shared prefix, at the same positions
    assert np.array_equal(binding_targets(packed)[1], target)


def test_binding_targets_of_image_prompts_come_from_the_object_table(tmp_path):
    bank = make_bank(tmp_path, "per_object")
    b = generate(IMAGE_SPEC, 64, np.random.default_rng(5), bank=bank)
    pos, target = binding_targets(b)
    for i in range(len(b)):
        assert got_bindings(pos, target, i) == expected_bindings(b, i, bank.objects)
    assert ((b.kind != GROUNDING) & (b.modality == IMAGE)).any() and (target >= 0).any()


def test_binding_loss_adds_its_weight_times_the_item_cross_entropy_of_a_full_forward():
    b = pack_queries(generate(TEXT_SPECS["symmetric"], 8, np.random.default_rng(4)))
    model = tiny()
    cfg = TrainConfig(binding_loss=0.5)
    with torch.no_grad():
        full = model(torch.from_numpy(b.tokens), torch.from_numpy(b.positions), groups=torch.from_numpy(b.groups))
        plain = training_loss(model, b, TrainConfig(), "cpu")
        got = training_loss(model, b, cfg, "cpu")
    pos, target = binding_targets(b)
    rows = [[F.cross_entropy(full[i, p], torch.tensor(t)).item() for p, t in got_bindings(pos, target, i)]
            for i in range(len(b))]
    naive = np.mean([np.mean(r) if r else 0.0 for r in rows])
    assert plain.item() == pytest.approx(prompt_loss(full[np.arange(8)[:, None], np.maximum(b.answer_pos, 0)],
                                                     b.target).item(), rel=1e-5)
    assert got.item() == pytest.approx(plain.item() + 0.5 * naive, rel=1e-5)
