"""Colored shapes as images (paper, appendix C, "Image Rendering"; Figure 7).

The 13 shapes are filled SVG paths on a white background, rasterised with cairosvg. Colors are the 216
web-safe colors (an RGB grid over 00, 33, 66, 99, cc, ff, red slowest), so `color0001` is #000000 and
image training uses the first 8 (#000000 .. #003333). Edges are drawn with `shape-rendering: crispEdges`:
every pixel is either white or exactly the object's color, which makes the object table exact.
(color0216 is #ffffff, white on white; image training uses the first 8 colors, so it never appears.)

Two layouts (config `vision.layout`):
- `per_object`: one image per color-shape pair, the shape at a random place and size. Appendix C says
  "each colored shape is rendered as a 224x224 pixel image" and section 3 says the context "is a
  sequence of images where each entity is rendered with attribute"; this is our default.
- `canvas`: one image per prompt holding all its shapes at random, non-overlapping places (one shape per
  cell of a grid, at a random size and offset inside its cell). D.6 mentions "colored shapes on a canvas".

A bank is a list of images plus a table with one row per object: image, object, color, shape (1-based
vocabulary indices, so color=3 is token color0003), the shape's name, its hex color, its box
(x0, y0, x1, y1 in pixels, x1/y1 exclusive), the image size and the layout.
"""

from __future__ import annotations

import io
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from vlbind.core.schema import check_fields
from vlbind.core.settings import config_defaults, from_dict
from vlbind.core.vocab import SHAPES, WEB_SAFE

LAYOUTS = ("per_object", "canvas")


def hex_to_rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def _polygon(k: int, start: float = -math.pi / 2, radii=(0.5,)) -> list[tuple[float, float]]:
    """Regular polygon (or star, with two alternating radii) inscribed in the unit box."""
    n = k * len(radii)
    return [(0.5 + radii[i % len(radii)] * math.cos(start + 2 * math.pi * i / n),
             0.5 + radii[i % len(radii)] * math.sin(start + 2 * math.pi * i / n)) for i in range(n)]


def _path(points) -> str:
    return "M " + " L ".join(f"{x:.4f} {y:.4f}" for x, y in points) + " Z"


# Each shape as an SVG path in the unit box [0, 1]^2 (scaled into its box by a transform).
_SHAPE_PATHS = {
    "rectangle": _path([(0.0, 0.2), (1.0, 0.2), (1.0, 0.8), (0.0, 0.8)]),
    "circle": "M 0 0.5 A 0.5 0.5 0 1 0 1 0.5 A 0.5 0.5 0 1 0 0 0.5 Z",
    "hexagon": _path(_polygon(6, start=0.0)),
    "triangle": _path([(0.5, 0.0), (1.0, 1.0), (0.0, 1.0)]),
    "pentagon": _path(_polygon(5)),
    "rhombus": _path([(0.5, 0.0), (0.85, 0.5), (0.5, 1.0), (0.15, 0.5)]),
    "octagon": _path(_polygon(8, start=math.pi / 8)),
    "star": _path(_polygon(5, radii=(0.5, 0.2))),
    "heart": "M 0.5 0.25 C 0.5 0.0 0.0 0.0 0.0 0.3 C 0.0 0.6 0.35 0.75 0.5 1.0 "
             "C 0.65 0.75 1.0 0.6 1.0 0.3 C 1.0 0.0 0.5 0.0 0.5 0.25 Z",
    "semicircle": "M 0 0.75 A 0.5 0.5 0 0 1 1 0.75 Z",
    "cross": _path([(0.33, 0.0), (0.67, 0.0), (0.67, 0.33), (1.0, 0.33), (1.0, 0.67), (0.67, 0.67), (0.67, 1.0),
                    (0.33, 1.0), (0.33, 0.67), (0.0, 0.67), (0.0, 0.33), (0.33, 0.33)]),
    "arrow": _path([(0.0, 0.35), (0.55, 0.35), (0.55, 0.1), (1.0, 0.5), (0.55, 0.9), (0.55, 0.65), (0.0, 0.65)]),
    "annulus": "M 0 0.5 A 0.5 0.5 0 1 0 1 0.5 A 0.5 0.5 0 1 0 0 0.5 Z "
               "M 0.25 0.5 A 0.25 0.25 0 1 1 0.75 0.5 A 0.25 0.25 0 1 1 0.25 0.5 Z",
}


@dataclass(frozen=True)
@config_defaults("render")
class RenderConfig:
    layout: str
    size: int  # image side, pixels
    n_colors: int  # the first n web-safe colors
    renderings: int  # per_object: renderings (random placements) per color-shape pair
    n_images: int  # canvas: number of canvases
    min_objects: int  # canvas: objects per canvas
    max_objects: int
    min_scale: float  # shape side as a fraction of the image (per_object) or of its cell (canvas)
    max_scale: float
    seed: int

    def __post_init__(self) -> None:
        check_fields("render", self)  # types and ranges: the schema's
        if self.min_scale > self.max_scale:
            raise ValueError("RenderConfig needs min_scale <= max_scale")
        limit = min(len(SHAPES), self.n_colors)
        if self.layout == "canvas" and not 1 <= self.min_objects <= self.max_objects <= limit:
            raise ValueError(f"RenderConfig needs 1 <= min_objects <= max_objects <= {limit} "
                             "(objects on a canvas have distinct colors and shapes)")

    @classmethod
    def from_dict(cls, d: dict) -> RenderConfig:
        return from_dict(cls, d)

    def to_dict(self) -> dict:
        return asdict(self)


def svg(objects: list[tuple[int, int, tuple[int, int, int, int]]], size: int) -> str:
    """SVG text of a white `size`x`size` image holding (color index, shape index, box) objects (0-based)."""
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" shape-rendering="crispEdges">',
             f'<rect width="{size}" height="{size}" fill="#ffffff"/>']
    for color, shape, (x0, y0, x1, y1) in objects:
        parts.append(f'<path d="{_SHAPE_PATHS[SHAPES[shape]]}" fill="{WEB_SAFE[color]}" fill-rule="evenodd" '
                     f'transform="translate({x0} {y0}) scale({x1 - x0} {y1 - y0})"/>')
    return "".join(parts) + "</svg>"


class MissingSystemLibrary(RuntimeError):
    pass


CAIRO_HELP = ("rendering needs the cairo system library, which cairosvg could not load ({error}). Install it: "
              "Debian/Ubuntu `sudo apt install libcairo2`, Fedora `sudo dnf install cairo`, macOS `brew install "
              "cairo`, conda `conda install -c conda-forge cairo`; then rerun the job")


def _cairosvg():
    """cairosvg, or MissingSystemLibrary saying what to install when the cairo library it loads is absent
    (cairocffi's own message only names 'cairo-2')."""
    try:
        import cairosvg
    except OSError as e:
        raise MissingSystemLibrary(CAIRO_HELP.format(error=e)) from None
    return cairosvg


def rasterize(svg_text: str) -> np.ndarray:
    """(size, size, 3) uint8 RGB. Raises MissingSystemLibrary without the cairo system library."""
    from PIL import Image

    cairosvg = _cairosvg()

    png = cairosvg.svg2png(bytestring=svg_text.encode())
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def render(objects, size: int) -> np.ndarray:
    return rasterize(svg(objects, size))


def layout_objects(cfg: RenderConfig) -> pd.DataFrame:
    """The bank's object table (no pixels yet): one row per object, boxes drawn from cfg.seed."""
    rng = np.random.default_rng([cfg.seed, LAYOUTS.index(cfg.layout)])
    rows = []
    if cfg.layout == "per_object":
        image = 0
        for color in range(cfg.n_colors):
            for shape in range(len(SHAPES)):
                for _ in range(cfg.renderings):
                    side = int(round(rng.uniform(cfg.min_scale, cfg.max_scale) * cfg.size))
                    x0, y0 = rng.integers(0, cfg.size - side + 1, size=2)
                    rows.append((image, 0, color, shape, x0, y0, x0 + side, y0 + side))
                    image += 1
    else:
        grid = math.ceil(math.sqrt(cfg.max_objects))
        cell = cfg.size // grid
        for image in range(cfg.n_images):
            n = int(rng.integers(cfg.min_objects, cfg.max_objects + 1))
            colors = rng.permutation(cfg.n_colors)[:n]
            shapes = rng.permutation(len(SHAPES))[:n]
            cells = rng.permutation(grid * grid)[:n]
            for k in range(n):
                side = int(round(rng.uniform(cfg.min_scale, cfg.max_scale) * cell))
                cx, cy = cells[k] % grid * cell, cells[k] // grid * cell
                dx, dy = rng.integers(0, cell - side + 1, size=2)
                rows.append((image, k, colors[k], shapes[k], cx + dx, cy + dy, cx + dx + side, cy + dy + side))
    df = pd.DataFrame(rows, columns=["image", "object", "color", "shape", "x0", "y0", "x1", "y1"]).astype("int64")
    df["shape_name"] = [SHAPES[s] for s in df["shape"]]
    df["hex"] = [WEB_SAFE[c] for c in df["color"]]
    df["image_size"] = cfg.size
    df["layout"] = cfg.layout
    df["color"] += 1  # 1-based: color index k is token color{k:04d}
    df["shape"] += 1
    return df


def placements(rows: pd.DataFrame) -> list[tuple[int, int, tuple[int, int, int, int]]]:
    """layout_objects rows as `render` draws them: (color index, shape index, box), 0-based."""
    return [(r.color - 1, r.shape - 1, (r.x0, r.y0, r.x1, r.y1)) for r in rows.itertuples()]


def image_path(directory: Path, image: int) -> Path:
    return Path(directory) / f"{image:06d}.png"


def render_bank(cfg: RenderConfig, out_dir: Path, progress=None) -> pd.DataFrame:
    """Render every image of the bank into `out_dir/images/` and write `out_dir/objects.parquet`."""
    from PIL import Image

    from vlbind.core.files import atomic_write

    out_dir = Path(out_dir)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    objects = layout_objects(cfg)
    images = sorted(objects["image"].unique())
    for image, group in objects.groupby("image"):
        pixels = render(placements(group), cfg.size)
        atomic_write(image_path(out_dir / "images", image), lambda tmp, p=pixels: Image.fromarray(p).save(tmp, "PNG"))
        if progress is not None:
            progress(image + 1, len(images))
    atomic_write(out_dir / "objects.parquet", lambda tmp: objects.to_parquet(tmp, index=False))
    return objects


def load_image(directory: Path, image: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(image_path(directory, image)).convert("RGB"))
