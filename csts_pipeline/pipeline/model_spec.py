"""How a language model is chosen (`ModelSpec`): the options of every command that asks one (annotate rate, draft,
check-conditions; evaluate's prompting baseline), each default declared here once. Kept apart from
pipeline/language_model/ and light to import, so the command line can read the defaults to build its help."""

from __future__ import annotations

import os
from dataclasses import dataclass

from csts_pipeline.pipeline.errors import UserError

READ_MODES = ("auto", "logprobs", "samples")


@dataclass
class ModelSpec:
    """The command line's choice: a local model (`model`: hub name, folder or .gguf file) or a server (`endpoint`,
    with `model` naming the served model, default the first it lists). The API key is read from the environment
    variable `api_key_env` and never recorded."""

    model: str | None = None
    endpoint: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    batch_size: int = 8
    samples: int = 10  # an endpoint without logprobs: answers sampled per question
    device: str = "auto"
    connect_timeout: float = 5.0
    timeout: float = 60.0  # an endpoint: the most one request may take, all its tries and waits together
    run_timeout: float | None = None  # an endpoint: the most all requests of one run may take (None: no limit)
    read: str = "auto"  # an endpoint: logprobs, samples, or auto (logprobs; samples for a reply without them)

    def check(self) -> None:
        """Refuse a choice that cannot work, before a model is loaded or a server asked."""
        if self.model is None and self.endpoint is None:
            raise UserError("give --model NAME_OR_PATH (a local model) or --endpoint URL (an OpenAI-compatible server)")
        if self.batch_size < 1:
            raise UserError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.samples < 1:
            raise UserError(f"--samples must be at least 1 (got {self.samples})")
        if not self.timeout > 0 or (self.run_timeout is not None and not self.run_timeout > 0):
            raise UserError(f"--timeout and --run-timeout must be positive (got {self.timeout}, {self.run_timeout})")
        if self.read not in READ_MODES:
            raise UserError(f"--read must be one of {', '.join(READ_MODES)} (got {self.read!r})")

    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None
