"""The command line that the model-reading scripts here share: MODEL_DIR [--fixed] [--resume FILE]."""
import argparse

import torch

from vlbind.checkpoint import load_model
from vlbind.model import Transformer
from vlbind.train import resume_weights


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a model directory (with --resume: any model of the same architecture)")
    ap.add_argument("--fixed", action="store_true", help="association list in context order (stages 1-3)")
    ap.add_argument("--resume", help="a running stage's resume.safetensors: its current weights")
    return ap


def load(args: argparse.Namespace) -> Transformer:
    """MODEL_DIR's model, or with --resume a running stage's current weights; one thread, eval mode."""
    torch.set_num_threads(1)
    model, _ = load_model(args.model)
    if args.resume:
        model.load_state_dict(resume_weights(args.resume))
    return model.eval()
