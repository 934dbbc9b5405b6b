"""Snakemake adapter: encode every image of a bank once with a frozen timm encoder."""
import pandas as pd
import torch

from vlbind.device import precision_for, resolve_device
from vlbind.encoders import EncoderSpec, extract
from vlbind.logs import setup_logging

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
torch.set_num_threads(sm.threads)
device = resolve_device(sm.params.device)
n_images = int(pd.read_parquet(sm.input.objects, columns=["image"])["image"].max()) + 1
index = extract(EncoderSpec.from_dict(sm.params.encoder), sm.input.images, n_images, sm.output.features,
                batch_size=sm.params.batch_size, device=device,
                precision=precision_for(sm.params.precision, device))
log.info("wrote %s: %s", sm.output.features, index)
