"""Prompts as versioned package files, not strings in code: `<package>/prompts/<name>_v<N>.txt`, a `[system]` and
a `[user]` part (optionally more turns), with `{field}` placeholders. The version and a digest of the text go into
the cache key and the record, so editing a prompt never reuses answers to the old one."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from csts_pipeline.pipeline.errors import UserError

_FILE = re.compile(r"(?P<name>[a-z0-9_]+?)_v(?P<version>\d+)\.txt")
_PART = re.compile(r"^\[(system|user|assistant)\]\s*$", re.M)


@dataclass(frozen=True)
class Prompt:
    """One prompt file: its name, version, digest and turns [(role, template)]."""

    name: str
    version: int
    digest: str
    turns: tuple[tuple[str, str], ...]

    @property
    def id(self) -> str:
        return f"{self.name}_v{self.version}"

    def chat(self, **fields: Any) -> list[dict[str, str]]:
        """The turns with `fields` filled in, as chat messages."""
        return [{"role": role, "content": text.format_map(fields)} for role, text in self.turns]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "digest": self.digest}


def load_prompt(package: str, name: str, version: int | None = None) -> Prompt:
    """The prompt `name` from `package`'s `prompts/` folder: the given version, else the highest there is."""
    folder = resources.files(package) / "prompts"
    found = {}
    for entry in folder.iterdir():
        match = _FILE.fullmatch(entry.name)
        if match and match["name"] == name:
            found[int(match["version"])] = entry
    if not found or (version is not None and version not in found):
        wanted = f"{name}_v{version}" if version is not None else f"{name}_v<N>"
        raise UserError(f"{package}: no prompt file prompts/{wanted}.txt")
    version = max(found) if version is None else version
    text = found[version].read_text(encoding="utf-8")
    return Prompt(name, version, hashlib.sha256(text.encode()).hexdigest()[:16], _turns(text, found[version].name))


def _turns(text: str, where: str) -> tuple[tuple[str, str], ...]:
    pieces = _PART.split(text)
    if pieces[0].strip() or len(pieces) < 3:
        raise ValueError(f"{where}: a prompt file is [system]/[user]/[assistant] parts, each on its own line")
    return tuple((role, body.strip()) for role, body in zip(pieces[1::2], pieces[2::2]))
