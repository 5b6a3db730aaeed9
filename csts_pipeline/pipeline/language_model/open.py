"""`open_model`: the one place a step turns `--model`/`--endpoint` into a `LanguageModel`."""

from __future__ import annotations

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model.base import LanguageModel
from csts_pipeline.pipeline.model_spec import ModelSpec


def open_model(spec: ModelSpec) -> LanguageModel:
    """A server when `spec.endpoint` is given (`spec.model` then names the served model), else a local model."""
    spec.check()
    if spec.endpoint is not None:
        from csts_pipeline.pipeline.language_model.endpoint import EndpointModel

        return EndpointModel(spec)
    from csts_pipeline.pipeline.language_model.local import LocalModel

    if spec.model is None:
        raise UserError("give --model NAME_OR_PATH or --endpoint URL (the language model to ask)")
    return LocalModel(spec.model, spec.device, spec.batch_size)
