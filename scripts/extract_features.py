"""Snakemake adapter: encode every image of a bank once with a frozen timm encoder."""
import pandas as pd

from vlbind.core.device import job_device
from vlbind.core.logs import setup_logging
from vlbind.params import speed_settings
from vlbind.vision.encoders import EncoderSpec, extract

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, precision = job_device(sm.params.device, sm.threads, sm.params.precision)
n_images = int(pd.read_parquet(sm.input.objects, columns=["image"])["image"].max()) + 1
index = extract(EncoderSpec.from_dict(sm.params.encoder), sm.input.images, n_images, sm.output.features,
                batch_size=speed_settings(sm.config, "vision")["extract_batch_size"], device=device,
                precision=precision)
log.info("wrote %s: %s", sm.output.features, index)
