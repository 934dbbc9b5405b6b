"""The image bank as prompt generators see it: rendered objects (data/render.py) + encoded patch tokens
(vision/encoders.py). numpy and pandas only, so data/tasks.py stays light.

Row i of the feature array holds image i's tokens, (tokens_per_image, dim), patches in row-major order
of the encoder's grid. Each patch knows the object slot it shows (the object whose box holds the patch
centre; -1 for background), which is what `Batch.slots` reports at image positions.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vlbind.core.files import CorruptFileError, load_npy, read_json


@dataclass
class ImageBank:
    layout: str  # "per_object" or "canvas"
    objects: pd.DataFrame  # render.layout_objects() table
    features: np.ndarray  # (n_images, tokens_per_image, dim) float16, usually a memmap
    index: dict  # the feature file's JSON index

    def __post_init__(self) -> None:
        n_images = int(self.objects["image"].max()) + 1
        if self.features.shape[0] != n_images:
            raise ValueError(f"feature bank has {self.features.shape[0]} rows but the object table {n_images} images")
        self.n_colors = int(self.objects["color"].max())
        self.n_shapes = int(self.objects["shape"].max())
        o = self.objects.sort_values(["image", "object"])
        image, color, shape = (o[c].to_numpy() for c in ("image", "color", "shape"))
        if self.layout == "per_object":
            # images_of[color, shape] -> every variant's image id (0-based color and shape)
            counts = np.bincount((color - 1) * self.n_shapes + (shape - 1), minlength=self.n_colors * self.n_shapes)
            if counts.min() != counts.max() or counts.min() == 0:
                raise ValueError("per_object bank needs the same number of images for every color-shape pair")
            order = np.lexsort((image, shape, color))
            self.images_of = image[order].reshape(self.n_colors, self.n_shapes, counts[0])
        else:
            per_image = np.bincount(image, minlength=n_images)
            self.canvas_n = per_image
            self.canvas_colors = np.full((n_images, per_image.max()), -1, dtype=np.int64)
            self.canvas_shapes = self.canvas_colors.copy()
            self.canvas_colors[image, o["object"].to_numpy()] = color - 1
            self.canvas_shapes[image, o["object"].to_numpy()] = shape - 1
        self.patch_slot = self._patch_slots(o, n_images)

    @property
    def tokens_per_image(self) -> int:
        return self.features.shape[1]

    @property
    def dim(self) -> int:
        return self.features.shape[2]

    @classmethod
    def open(cls, bank_dir: Path, features_path: Path) -> ImageBank:
        bank_dir, features_path = Path(bank_dir), Path(features_path)
        for p in (bank_dir / "objects.parquet", features_path, features_path.with_suffix(".json")):
            if not p.is_file():
                raise FileNotFoundError(f"image bank file {p} is missing; run the render_bank / extract_features rules")
        objects = pd.read_parquet(bank_dir / "objects.parquet")
        index = read_json(features_path.with_suffix(".json"), "features index")
        features = load_npy(features_path, "feature array")
        if features.ndim != 3 or index.get("tokens_per_image") != features.shape[1]:
            raise CorruptFileError(features_path.with_suffix(".json"), "features index",
                                   f"it does not describe {features_path}, shape {features.shape}")
        return cls(str(objects["layout"].iloc[0]), objects, features, index)

    def _patch_slots(self, o: pd.DataFrame, n_images: int) -> np.ndarray:
        side = math.isqrt(self.tokens_per_image)
        slots = np.full((n_images, side * side), -1, dtype=np.int8)
        if self.layout == "per_object":
            return np.zeros_like(slots)  # every patch belongs to the one object of its image
        size = int(o["image_size"].iloc[0])
        centre = (np.arange(side) + 0.5) * size / side
        cy, cx = np.meshgrid(centre, centre, indexing="ij")
        cx, cy = cx.ravel(), cy.ravel()
        for r in o.itertuples():
            inside = (cx >= r.x0) & (cx < r.x1) & (cy >= r.y0) & (cy < r.y1)
            slots[r.image, inside] = r.object
        return slots

    def split(self, held_out: float) -> tuple[ImageBank, ImageBank]:
        """(training, validation) views of the bank that share no image: validation gets `held_out` of every
        color-shape pair's renderings (per_object) or of the canvases (canvas), at least one, and training
        the rest. Raises ValueError when nothing would be left for training."""
        train, val = copy.copy(self), copy.copy(self)
        if self.layout == "per_object":
            renderings = self.images_of.shape[2]
            k = max(1, round(held_out * renderings))
            if k >= renderings:
                raise ValueError(f"the image bank has {renderings} rendering(s) per color-shape pair: too few to hold "
                                 f"{held_out:.0%} out for validation; render more (render.renderings)")
            train.images_of, val.images_of = self.images_of[:, :, :-k], self.images_of[:, :, -k:]
        else:
            n_images = len(self.canvas_n)
            k = max(1, round(held_out * n_images))
            if k >= n_images:
                raise ValueError(f"the canvas bank has {n_images} canvases: too few to hold {held_out:.0%} out")
            held = np.arange(n_images) >= n_images - k
            train.canvas_n, val.canvas_n = np.where(held, -1, self.canvas_n), np.where(held, self.canvas_n, -1)
        return train, val

    def sample_object_images(self, colors: np.ndarray, shapes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """per_object: a random variant's image id for each (0-based color, shape); -1 stays -1."""
        valid = colors >= 0
        if (colors[valid] >= self.n_colors).any() or (shapes[valid] >= self.n_shapes).any():
            raise ValueError(f"the image bank holds colors 1..{self.n_colors} and shapes 1..{self.n_shapes}; "
                             "restrict the stage's n_colors / n_shapes to those")
        variant = rng.integers(0, self.images_of.shape[2], size=colors.shape)
        out = np.full(colors.shape, -1, dtype=np.int64)
        out[valid] = self.images_of[colors[valid], shapes[valid], variant[valid]]
        return out

    def sample_canvases(self, n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """canvas: for each requested object count, a random canvas holding that many objects."""
        out = np.empty(len(n), dtype=np.int64)
        for k in np.unique(n):
            pool = np.flatnonzero(self.canvas_n == k)
            if len(pool) == 0:
                raise ValueError(f"the canvas bank has no image with {k} objects "
                                 f"(it has {sorted(set(self.canvas_n.tolist()))})")
            rows = n == k
            out[rows] = pool[rng.integers(0, len(pool), size=int(rows.sum()))]
        return out

    def gather(self, images: np.ndarray, patches: np.ndarray) -> np.ndarray:
        """Feature vectors (M, dim) float32 of (image, patch) pairs."""
        order = np.argsort(images, kind="stable")  # read the memmap in file order
        out = np.empty((len(images), self.dim), dtype=np.float32)
        out[order] = self.features[images[order], patches[order]]
        return out
