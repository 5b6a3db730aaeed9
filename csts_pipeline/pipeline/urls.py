"""Locations given as URLs (s3://, gs://, hf://, file://, memory://) or paths, and the fsspec filesystem of a URL:
the small part of pipeline.storage that the manifest and the command line need."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from csts_pipeline.pipeline.errors import UserError

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_DRIVERS = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "hf": "huggingface_hub", "az": "adlfs"}
_DRIVERS |= {"abfs": "adlfs", "abfss": "adlfs"}


def is_url(value: object) -> bool:
    """`scheme://...`: anything else is a local path."""
    return isinstance(value, str) and _URL.match(value) is not None


def location(value: str | None) -> str | Path | None:
    """A location given on the command line: a URL as it is, anything else a path (relative to the current
    folder, as in every CLI). Typer's Path type would fold `memory://x` into `memory:/x`, hence strings."""
    if value is None or is_url(value):
        return value
    return Path(value)


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it); a missing driver or an unknown protocol is one line naming the URL."""
    protocol = url.split("://", 1)[0].lower()
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url)
    except ImportError:
        package = _DRIVERS.get(protocol, f"the fsspec driver of {protocol}://")
        message = f"{protocol}:// needs {package}, which is not installed: pip install {package}"
        raise UserError(f"{url}: {message}") from None
    except ValueError as exc:
        known = "give a local path or an s3://, gs://, hf://, file:// or memory:// URL"
        raise UserError(f"{url}: {exc}; {known}") from None
    return fs, path.rstrip("/")


def display(fs: Any, path: str) -> str:
    return fs.unstrip_protocol(path)
