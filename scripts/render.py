"""Snakemake adapter: render the image bank (images + object table)."""
from pathlib import Path

from vlbind.core.logs import setup_logging
from vlbind.data.render import RenderConfig, render_bank

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
cfg = RenderConfig.from_dict(sm.params.render)


def progress(done, total):
    if done % 200 == 0 or done == total:
        log.info("rendered %d/%d images", done, total)


objects = render_bank(cfg, Path(sm.output.objects).parent, progress)
log.info("%s bank: %d images, %d objects", cfg.layout, objects["image"].nunique(), len(objects))
