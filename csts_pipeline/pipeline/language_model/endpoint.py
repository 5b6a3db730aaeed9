"""Any OpenAI-compatible server (vLLM, llama.cpp's server, Ollama, a hosted API) through its /v1 HTTP API, with the
standard library only. Options are read from `logprobs`/`top_logprobs` of a one-token chat completion; a server
that gives no logprobs is asked for several sampled answers instead. Requests run `batch_size` at a time, are
retried with backoff on connection errors, 429 and 5xx, and an unreachable server is a one-line error in seconds."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model.base import (
    TOP_K,
    Cost,
    LanguageModel,
    Messages,
    ModelSpec,
    option_distribution,
)

RETRIES = 4  # after the first try: waits of 1, 2, 4, 8 s
READ_TIMEOUT_S = 120.0
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class EndpointModel(LanguageModel):
    """One model served at `spec.endpoint` (its base URL, with or without /v1)."""

    def __init__(self, spec: ModelSpec):
        base = (spec.endpoint or "").rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.spec = spec
        self.cost = Cost()
        self.logprobs = True  # until the server shows it gives none
        served = self._models()
        if spec.model is not None and spec.model not in served:
            listed = ", ".join(served[:5]) or "none"
            raise UserError(f"endpoint {spec.endpoint}: serves no model {spec.model!r} (it lists: {listed})")
        self.model = spec.model or served[0]
        self.name = self.model.rsplit("/", 1)[-1]

    @property
    def identity(self) -> dict[str, Any]:
        return {"kind": "endpoint", "model": self.model, "endpoint": self.base}

    def decoding(self) -> dict[str, Any]:
        found = super().decoding()
        if not self.logprobs:
            found["options_from"] = f"{self.spec.samples} sampled answers (the server gives no logprobs)"
        return found

    # --- HTTP ---------------------------------------------------------------------------------------------------

    def _request(self, path: str, body: dict[str, Any] | None = None, timeout: float = READ_TIMEOUT_S) -> Any:
        headers = {"Content-Type": "application/json"}
        key = self.spec.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

    def _models(self) -> list[str]:
        """The served models; the first contact, with a short timeout, so a dead server fails in seconds."""
        try:
            listed = self._request("/models", timeout=self.spec.connect_timeout)
        except urllib.error.HTTPError as exc:
            where = f"GET {self.base}/models"
            raise UserError(f"endpoint {self.spec.endpoint}: {exc.code} {exc.reason} on {where}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise UserError(f"endpoint {self.spec.endpoint} cannot be reached ({reason})") from None
        served = [entry.get("id") for entry in listed.get("data", []) if entry.get("id")]
        if not served and self.spec.model is None:
            raise UserError(f"endpoint {self.spec.endpoint}: lists no model; name one with --model")
        return served

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries and exponential backoff; the last failure is a one-line UserError."""
        for attempt in range(RETRIES + 1):
            try:
                return self._request(path, body)
            except urllib.error.HTTPError as exc:
                if exc.code not in _RETRY_STATUS or attempt == RETRIES:
                    detail = exc.read().decode(errors="replace")[:200].replace("\n", " ")
                    raise UserError(f"endpoint {self.spec.endpoint}: {exc.code} on POST {path}: {detail}") from None
            except (urllib.error.URLError, OSError) as exc:
                if attempt == RETRIES:
                    reason = getattr(exc, "reason", exc)
                    raise UserError(f"endpoint {self.spec.endpoint}: POST {path} failed ({reason})") from None
            time.sleep(2.0**attempt)
        raise AssertionError("unreachable")

    def _all(self, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        with self.cost.timed(), ThreadPoolExecutor(self.spec.batch_size) as pool:
            replies = list(pool.map(lambda body: self._post(path, body), bodies))
        for reply in replies:
            usage = reply.get("usage") or {}
            self.cost.add(1, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        return replies

    # --- questions ----------------------------------------------------------------------------------------------

    def option_probs(self, chats: list[Messages], options: Sequence[str]) -> list[np.ndarray]:
        """From `top_logprobs` of the first answer token; from sampled answers once the server gives none."""
        found: list[np.ndarray | None] = [None] * len(chats)
        if self.logprobs:
            body = {"model": self.model, "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": TOP_K}
            replies = self._all("/chat/completions", [body | {"messages": chat} for chat in chats])
            for index, reply in enumerate(replies):
                top = _top_logprobs(reply)
                if top is None:
                    self.logprobs = False
                    break
                found[index] = option_distribution(top, options)
        missing = [i for i, probs in enumerate(found) if probs is None]
        if missing:
            for index, probs in zip(missing, self._sampled([chats[i] for i in missing], options)):
                found[index] = probs
        return found  # type: ignore[return-value]

    def _sampled(self, chats: list[Messages], options: Sequence[str]) -> list[np.ndarray]:
        """Shares of `samples` answers at temperature 1 that begin with each option (uniform when none does)."""
        body = {"model": self.model, "max_tokens": 4, "temperature": 1.0, "n": self.spec.samples}
        replies = self._all("/chat/completions", [body | {"messages": chat} for chat in chats])
        found = []
        for reply in replies:
            counts = np.zeros(len(options))
            for choice in reply.get("choices", []):
                text = ((choice.get("message") or {}).get("content") or "").strip().casefold()
                hits = [i for i, option in enumerate(options) if text.startswith(option.casefold())]
                if hits:
                    counts[hits[0]] += 1
            found.append(counts / counts.sum() if counts.sum() else np.full(len(options), 1 / len(options)))
        return found

    def generate(self, prompts: list[Messages | str], max_tokens: int) -> list[str]:
        chats = [p for p in prompts if not isinstance(p, str)]
        if chats and len(chats) != len(prompts):
            raise ValueError("generate: all chats or all strings")
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": 0}
        if chats:
            replies = self._all("/chat/completions", [body | {"messages": chat} for chat in chats])
            return [(r["choices"][0].get("message") or {}).get("content") or "" for r in replies]
        replies = self._all("/completions", [body | {"prompt": prompt} for prompt in prompts])
        return [r["choices"][0].get("text") or "" for r in replies]


def _top_logprobs(reply: dict[str, Any]) -> list[tuple[str, float]] | None:
    """(token, logprob) of the first answer token's alternatives, or None when the reply carries none."""
    try:
        first = reply["choices"][0]["logprobs"]["content"][0]
        return [(entry["token"], float(entry["logprob"])) for entry in first["top_logprobs"]]
    except (KeyError, IndexError, TypeError):
        return None
