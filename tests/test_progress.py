"""docs/results/paper-rules/progress.py reads the validation lines of a run's train.log files as the training loop
writes them (vlbind.training.loop's format, an image stage's with its judged part in parentheses), across a retry and
a resume."""

import importlib.util
import logging
from pathlib import Path

PROGRESS = Path(__file__).resolve().parents[1] / "docs/results/paper-rules/progress.py"


def progress():
    spec = importlib.util.spec_from_file_location("progress", PROGRESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log_lines(path: Path, lines: list[tuple[str, str]]) -> None:
    """Write (logger, message) lines as a training job does (vlbind.core.logs.setup_logging's history file), the
    root logger's handlers restored after."""
    from vlbind.core.logs import setup_logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    try:
        setup_logging(None, history=path)
        for name, message in lines:
            logging.getLogger(name).info(message)
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:], root.level = saved


def test_text_and_image_validations_are_read_with_their_attempts(tmp_path):
    text = tmp_path / "results/models/seed0/noise_text"
    image = tmp_path / "results/models/seed0-render_cnn/image"
    for d in (text, image):
        d.mkdir(parents=True)
    loop, attempts = "vlbind.training.loop", "vlbind.training.attempts"
    log_lines(text / "train.log", [
        (loop, "noise_text step 250/40000 objects 2..8 loss 0.61 val_acc 0.8242 best 0.8242@250 skipped 0 | 6 steps/s"),
        (attempts, "noise_text: attempt 2 of 3 (the stall rule ended attempt 1)"),
        (loop, "noise_text step 250/40000 objects 2..8 loss 0.60 val_acc 0.5000 best 0.5000@250 skipped 0 | 6 steps/s"),
        (loop, "noise_text step 250/40000 objects 2..8 loss 0.60 val_acc 0.5100 best 0.5100@250 skipped 0 | resumed")])
    log_lines(image / "train.log", [
        (loop, "image step 6000/20000 objects 2..8 loss 0.0001 val_acc 1.0000 (retrieval, all 0.9941, retrieval "
               "1.0000, grounding 0.9880) best 1.0000@4000 skipped 0 | 3.2 steps/s")])
    (image / "meta.json").write_text("{}")
    p = progress()
    table = p.curves(tmp_path / "results")
    rows = {(r.unit, r.attempt): (r.step, r.val, r.best_step) for r in table.itertuples()}
    # attempt 2's step 250 logged twice (a resume repeats it): the later line is kept
    assert rows == {("noise_text", 1): (250, 0.8242, 250), ("noise_text", 2): (250, 0.51, 250),
                    ("image", 1): (6000, 1.0, 4000)}
    assert p.summary(table) == ["seed0 noise_text: attempt 1 at 250 (best 0.824 at 250); attempt 2 at 250 "
                                "(best 0.510 at 250)",
                                "seed0-render_cnn image (finished): attempt 1 at 6,000 (best 1.000 at 4,000)"]
