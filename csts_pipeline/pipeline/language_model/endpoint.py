"""Any OpenAI-compatible server (vLLM, llama.cpp's server, Ollama, a hosted API) through its /v1 HTTP API, with the
standard library only. Options are read from `logprobs`/`top_logprobs` of a one-token chat completion; a reply
without them is asked again for several sampled answers (`read="auto"`), recorded per answer. The HTTP side
(bounded waiting, retries, one-line errors for malformed replies) is `endpoint_http.ServerConnection`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model.base import (
    TOP_K,
    Answer,
    Cost,
    LanguageModel,
    Messages,
    Unfinished,
    read_logprobs,
    read_samples,
    reading,
)
from csts_pipeline.pipeline.language_model.endpoint_http import ServerConnection, served_models
from csts_pipeline.pipeline.model_spec import ModelSpec

SAMPLE_TOKENS = 8  # a sampled reply: enough for "Rating: 4"
RECENT_S = 300  # a `created` this close to now is the time of the request (vLLM, llama.cpp), not the model's


class EndpointModel(LanguageModel):
    """One model served at `spec.endpoint` (its base URL, with or without /v1)."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.cost = Cost()
        self.http = ServerConnection(spec)
        self.base = self.http.base
        served = served_models(self.http)
        if spec.model is not None and spec.model not in served:
            listed = ", ".join(list(served)[:5]) or "none"
            raise UserError(f"endpoint {self.base}: serves no model {spec.model!r} (it lists: {listed})")
        self.model = spec.model or next(iter(served))
        self.card = served[self.model]
        self.name = self.model.rsplit("/", 1)[-1]
        self.fingerprints: set[str] = set()  # `system_fingerprint`s the replies of this run carried

    @property
    def identity(self) -> dict[str, Any]:
        """What the server says of the model (its id, `created` and `root` where they identify it) and how answers
        are read: new weights under the same name with a new `created` never reuse the old answers."""
        found: dict[str, Any] = {"kind": "endpoint", "model": self.model, "endpoint": self.base}
        created = self.card.get("created")
        if isinstance(created, int | float) and abs(time.time() - created) > RECENT_S:
            found["created"] = int(created)
        for name in ("root", "system_fingerprint"):
            if isinstance(self.card.get(name), str) and self.card[name]:
                found[name] = self.card[name]
        found["reading"] = {"mode": self.spec.read, "samples": self.spec.samples, **reading()}
        return found

    def decoding(self) -> dict[str, Any]:
        found = super().decoding()
        found["options_from"] = {
            "auto": f"next-token probabilities, top {TOP_K}; {self.spec.samples} sampled answers for a reply "
            "without logprobs (per answer: read_mode)",
            "logprobs": f"next-token probabilities, top {TOP_K} (a reply without them: no answer)",
            "samples": f"{self.spec.samples} sampled answers at temperature 1",
        }[self.spec.read]
        found["system_fingerprints"] = sorted(self.fingerprints)
        return found

    def _post_all(self, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The replies, their time and tokens counted in this model's cost (a step swaps in its own `Cost`); those
        of an `Unfinished` batch too."""
        try:
            with self.cost.timed():
                replies = self.http.post_all(path, bodies)
        except Unfinished as exc:
            self._count(list(exc.done.values()))
            raise
        self._count(replies)
        return replies

    def _count(self, replies: list[dict[str, Any]]) -> None:
        for reply in replies:
            usage: dict[str, Any] = reply["usage"] if isinstance(reply.get("usage"), dict) else {}
            self.cost.add(1, _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")))

    # --- questions ----------------------------------------------------------------------------------------------

    def option_probs(self, chats: list[Messages], options: Sequence[str]) -> list[Answer]:
        """From `top_logprobs` of the first answer token; per chat whose reply has none, from sampled answers
        (`read="auto"`), or no answer (`read="logprobs"`). Stopped for good (`Unfinished`), it carries the answers
        read from the replies that came back."""
        found: list[Answer | None] = [None] * len(chats)

        def from_logprobs(index: int, reply: dict[str, Any]) -> None:
            found[index] = self._from_logprobs(reply, options)

        try:
            if self.spec.read != "samples":
                body = {"model": self.model, "max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": TOP_K}
                self._read_replies([body | {"messages": chat} for chat in chats], from_logprobs)
            missing = [i for i, answer in enumerate(found) if answer is None]
            if missing:
                body = {"model": self.model, "max_tokens": SAMPLE_TOKENS, "temperature": 1.0, "n": self.spec.samples}
                self._read_replies(
                    [body | {"messages": chats[i]} for i in missing],
                    lambda at, reply: found.__setitem__(missing[at], self._from_samples(reply, options)),
                )
        except Unfinished as exc:
            raise Unfinished(str(exc), {i: a for i, a in enumerate(found) if a is not None}) from None
        return found  # type: ignore[return-value]

    def _read_replies(self, bodies: list[dict[str, Any]], read: Callable[[int, dict[str, Any]], None]) -> None:
        """`read(index of the body, reply)` for every reply; for those that came back before the batch stopped for
        good too, then `Unfinished` goes on up."""
        try:
            replies = dict(enumerate(self._post_all("/chat/completions", bodies)))
        except Unfinished as exc:
            for index, reply in exc.done.items():
                read(index, reply)
            raise
        for index, reply in replies.items():
            read(index, reply)

    def _from_logprobs(self, reply: dict[str, Any], options: Sequence[str]) -> Answer | None:
        """The answer a reply's logprobs give; None when it carries none and samples may be asked instead."""
        fingerprint = self._fingerprint(reply)
        top = _top_logprobs(reply)
        if top is None:
            if self.spec.read == "auto":
                return None
            return Answer(None, "logprobs", None, missing="no_logprobs", system_fingerprint=fingerprint)
        if isinstance(top, str):
            return Answer(None, "logprobs", None, missing=top, system_fingerprint=fingerprint)
        return replace(read_logprobs(top, options), system_fingerprint=fingerprint)

    def _from_samples(self, reply: dict[str, Any], options: Sequence[str]) -> Answer:
        """The answer of `samples` replies at temperature 1, read by `read_samples` against the number asked for
        (a server that ignores `n` gives too few to be an answer)."""
        texts = [_message(choice) for choice in reply["choices"]]
        answer = read_samples(texts, options, self.spec.samples)
        return replace(answer, system_fingerprint=self._fingerprint(reply))

    def _fingerprint(self, reply: dict[str, Any]) -> str | None:
        value = reply.get("system_fingerprint")
        if isinstance(value, str) and value:
            self.fingerprints.add(value)
            return value
        return None

    def generate(self, prompts: list[Messages | str], max_tokens: int) -> list[str]:
        chats = [p for p in prompts if not isinstance(p, str)]
        if chats and len(chats) != len(prompts):
            raise ValueError("generate: all chats or all strings")
        body = {"model": self.model, "max_tokens": max_tokens, "temperature": 0}
        if chats:
            replies = self._post_all("/chat/completions", [body | {"messages": chat} for chat in chats])
            return [_message(reply["choices"][0]) for reply in replies]
        replies = self._post_all("/completions", [body | {"prompt": prompt} for prompt in prompts])
        return [_text(reply["choices"][0]) for reply in replies]


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0


def _message(choice: dict[str, Any]) -> str:
    """A chat choice's text ("" when it has none; the connection checked its shape)."""
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, str) else ""


def _text(choice: dict[str, Any]) -> str:
    text = choice.get("text")
    return text if isinstance(text, str) else ""


def _top_logprobs(reply: dict[str, Any]) -> list[tuple[str, float]] | str | None:
    """(token, logprob) of the first answer token's alternatives; None when the reply carries no logprobs;
    "bad_logprobs" when it carries them in a shape or with values that are not logprobs."""
    logprobs = reply["choices"][0].get("logprobs")
    if not logprobs:
        return None
    if not isinstance(logprobs, dict):
        return "bad_logprobs"
    try:
        first = logprobs["content"][0]
        pairs = [(str(entry["token"]), entry["logprob"]) for entry in first["top_logprobs"]]
    except (KeyError, IndexError, TypeError):
        return None if logprobs.get("content") in (None, []) else "bad_logprobs"
    if not pairs or not all(isinstance(v, int | float) and not isinstance(v, bool) for _, v in pairs):
        return "bad_logprobs"
    return [(token, float(value)) for token, value in pairs]
