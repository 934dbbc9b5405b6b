"""Snakemake adapter: pretrain an encoder with a `pretrain` section on renderings (mini's frozen encoder)."""
from vlbind import config as vlconfig
from vlbind.core.device import job_device
from vlbind.core.logs import setup_logging
from vlbind.vision.pretrain import PretrainConfig, pretrain

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, precision = job_device(sm.params.device, sm.threads, sm.params.precision)
spec = sm.params.encoder
if spec.get("pretrain") is None:
    raise vlconfig.ConfigError(f"encoder {sm.wildcards.encoder!r} has no 'pretrain' section: nothing to pretrain")
result = pretrain(spec["timm_name"], PretrainConfig.from_dict(spec["pretrain"]), sm.params.size, sm.params.n_colors,
                  sm.output.weights, device=device, precision=precision,
                  model_kwargs=spec.get("model_kwargs"))
log.info("wrote %s: %s", sm.output.weights, result)
