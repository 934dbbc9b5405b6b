"""The token vocabulary of the indirect retrieval task and its text format (paper, appendix C).

Ids are laid out in one fixed order so that a restricted stage ("the first 8 colors") is a prefix of
each group: specials, then color0001..color0216, shape0001..shape0216, item0001..item0032, then
[IMAGE] (last, so adding it left every earlier id unchanged).
Text shapes are symbols (216 of them, as in the curriculum's vocabulary expansion); the 13 renderable
shapes of the image arm are the first 13.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SPECIALS = ("[PAD]", "[CONTEXTEND]", "[SEP]", "[QUESTION]", "[ANSWER]", "[NOISE]")

# The image arm's visual vocabulary (vlbind.data.render draws it): the 13 renderable shapes, shape0001..shape0013's
# pictures, and the 216 web-safe colors, color0001..color0216's. Here, below the schema, whose bounds on the render
# section are their counts.
SHAPES = ("rectangle", "circle", "hexagon", "triangle", "pentagon", "rhombus", "octagon", "star", "heart",
          "semicircle", "cross", "arrow", "annulus")
_LEVELS = ("00", "33", "66", "99", "cc", "ff")
WEB_SAFE = tuple(f"#{r}{g}{b}" for r in _LEVELS for g in _LEVELS for b in _LEVELS)


@dataclass(frozen=True)
class Vocab:
    """Token ids <-> strings. Groups are contiguous: `color(i)` is `color_offset + i` (0-based i)."""

    n_colors: int = 216
    n_shapes: int = 216
    n_items: int = 32
    tokens: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        toks = list(SPECIALS)
        toks += [f"color{i + 1:04d}" for i in range(self.n_colors)]
        toks += [f"shape{i + 1:04d}" for i in range(self.n_shapes)]
        toks += [f"item{i + 1:04d}" for i in range(self.n_items)]
        toks += ["[IMAGE]"]  # placeholder of an image patch token (the projector's output replaces it)
        object.__setattr__(self, "tokens", tuple(toks))

    # specials
    pad = 0
    context_end = 1
    sep = 2
    question = 3
    answer = 4
    noise = 5

    @property
    def color_offset(self) -> int:
        return len(SPECIALS)

    @property
    def shape_offset(self) -> int:
        return self.color_offset + self.n_colors

    @property
    def item_offset(self) -> int:
        return self.shape_offset + self.n_shapes

    @property
    def image(self) -> int:
        return self.item_offset + self.n_items

    def __len__(self) -> int:
        return len(self.tokens)

    def id(self, token: str) -> int:
        try:
            return self._index[token]
        except KeyError:
            raise KeyError(f"unknown token {token!r}; valid: specials {SPECIALS}, "
                           f"color0001..color{self.n_colors:04d}, shape0001..shape{self.n_shapes:04d}, "
                           f"item0001..item{self.n_items:04d}") from None

    @property
    def _index(self) -> dict[str, int]:
        cached = self.__dict__.get("_index_cache")
        if cached is None:
            cached = {t: i for i, t in enumerate(self.tokens)}
            object.__setattr__(self, "_index_cache", cached)
        return cached

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.id(t) for t in text.split()], dtype=np.int64)

    def decode(self, ids, skip_pad: bool = True) -> str:
        return " ".join(self.tokens[int(i)] for i in ids if not (skip_pad and int(i) == self.pad))

    def group(self, token_id: int) -> str:
        """'special', 'color', 'shape' or 'item'."""
        if token_id < self.color_offset:
            return "special"
        if token_id < self.shape_offset:
            return "color"
        if token_id < self.item_offset:
            return "shape"
        if token_id < self.image:
            return "item"
        if token_id == self.image:
            return "special"
        raise ValueError(f"token id {token_id} is outside the vocabulary (size {len(self)})")


VOCAB = Vocab()
