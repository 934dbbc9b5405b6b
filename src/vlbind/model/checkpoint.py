"""Model directories and resumable training state: safetensors + JSON, written atomically.

A model directory holds `model.safetensors` (weights; the constructor arguments in its metadata),
`meta.json` (stage, settings, steps, best validation accuracy, parent, library version) and
`metrics.parquet` (the training curve). Nothing is ever unpickled from disk.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from vlbind.core.files import CorruptFileError, atomic_write, read_json, write_json
from vlbind.model.transformer import ModelConfig, Transformer

MODEL_FILE, META_FILE, METRICS_FILE = "model.safetensors", "meta.json", "metrics.parquet"


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict) -> None:
    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata={"json": json.dumps(metadata)}))


def load_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint file {path}")
    return _read(path, tensors=True)


def read_metadata(path: Path) -> dict:
    """The JSON metadata of a safetensors file written by save_tensors, without reading its tensors."""
    return _read(Path(path), tensors=False)[1]


def _read(path: Path, tensors: bool) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, or {} when not asked for, JSON metadata); a damaged file raises CorruptFileError."""
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = json.loads((f.metadata() or {}).get("json", "{}"))
            return ({k: f.get_tensor(k) for k in f.keys()} if tensors else {}), metadata
    except Exception as e:  # safetensors raises its own error types (header, truncation, JSON metadata)
        raise CorruptFileError(path, "safetensors file", e) from None


def save_model(directory: Path, model: Transformer, meta: dict, metrics: pd.DataFrame) -> None:
    """Write weights, meta.json and metrics.parquet of a finished stage into `directory`."""
    directory = Path(directory)
    save_tensors(directory / MODEL_FILE, model.state_dict(), {"model_config": model.cfg.to_dict()})
    atomic_write(directory / METRICS_FILE, lambda tmp: metrics.to_parquet(tmp, index=False))
    write_json(directory / META_FILE, meta)


def load_model(directory: Path, device: str | torch.device = "cpu") -> tuple[Transformer, dict]:
    """Rebuild the model stored in `directory` (from its own constructor arguments) and its meta."""
    directory = Path(directory)
    if not (directory / MODEL_FILE).is_file():
        raise FileNotFoundError(f"{directory} holds no {MODEL_FILE}; train that stage first")
    tensors, metadata = load_tensors(directory / MODEL_FILE)
    if "model_config" not in metadata:
        raise ValueError(f"{directory / MODEL_FILE} lacks the model_config metadata written by vlbind")
    model = Transformer(ModelConfig(**metadata["model_config"]))
    model.load_state_dict(tensors)
    meta_path = directory / META_FILE
    meta = read_json(meta_path, "model meta.json") if meta_path.is_file() else {}
    return model.to(device), meta


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list]:
    """Flatten an optimizer state dict into named tensors plus JSON-able param groups."""
    sd = opt.state_dict()
    tensors = {f"optim.{i}.{k}": v for i, st in sd["state"].items() for k, v in st.items()}
    return tensors, sd["param_groups"]


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: list) -> None:
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        _, i, k = key.split(".", 2)
        state.setdefault(int(i), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": groups})
