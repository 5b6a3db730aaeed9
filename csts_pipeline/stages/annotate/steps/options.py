"""The annotate steps' options, each declared once with its default: the step uses the default it names here, and
the command line (cli/annotate*.py) shows it from here. This module imports nothing heavy, so the command line can
read it to build its help."""

from __future__ import annotations

from dataclasses import dataclass

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.manifest import TrainConfig

MINILM = "packaged:all-MiniLM-L6-v2"


@dataclass(frozen=True, kw_only=True)
class CrossfitOptions:
    """What `annotate crossfit` trains and how: the base model, the folds and `train`'s settings for each fold."""

    model: str = MINILM
    folds: int = 5
    epochs: int = 1
    seed: int = 0
    batch_size: int = 16
    learning_rate: float = 2e-5
    max_length: int = 128
    device: str = "auto"
    force: bool = False

    def check(self) -> None:
        """Refuse a setting that cannot work, before anything is read or written."""
        limits = {"--folds": (self.folds, 2), "--epochs": (self.epochs, 1), "--batch-size": (self.batch_size, 1)}
        limits["--max-length"] = (self.max_length, 1)
        for flag, (value, least) in limits.items():
            if value < least:
                raise UserError(f"{flag} must be at least {least} (got {value})")
        if not self.learning_rate > 0:
            raise UserError(f"--lr must be above 0 (got {self.learning_rate})")

    def train_config(self) -> TrainConfig:
        """Each fold's `train` settings: the last epoch kept (no validation split to choose one by)."""
        return TrainConfig(
            model=self.model,
            epochs=self.epochs,
            seed=self.seed,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            max_length=self.max_length,
            select="last",
        )
