"""A small real OpenAI-compatible server for the tests: /v1/models, /v1/chat/completions and /v1/completions over
a transformers causal LM, with `logprobs`/`top_logprobs` of the first answer token, on loopback.

Why not `transformers serve`: its chat and completion handlers ignore `logprobs` and `top_logprobs` (listed as
unused fields in transformers 5.x), so it cannot show the path a logprob-giving server (vLLM, llama.cpp) takes.
This one answers as those do, from the same weights; `logprobs=False` makes it a server that gives none (the
sampling fallback). `python tests/support/openai_server.py FOLDER [PORT]` serves a model folder until killed."""

from __future__ import annotations

import json
import math
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ModelServer:
    """The model behind the HTTP handler; one request computes at a time."""

    def __init__(self, folder: str, name: str, logprobs: bool = True, loaded: tuple[Any, Any] | None = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if loaded is None:
            loaded = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
        self.model, self.tokenizer = loaded
        self.name = name
        self.logprobs = logprobs
        self.lock = threading.Lock()
        self.requests = 0

    def _ids(self, text: str) -> Any:
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]

    def _first_token(self, ids: Any, top: int) -> dict[str, Any]:
        import torch

        logprobs = torch.log_softmax(self.model(input_ids=ids).logits[0, -1, :].double(), dim=-1)
        values, tokens = logprobs.topk(max(top, 1))
        alternatives = [{"token": self.tokenizer.decode([int(t)]), "logprob": float(v)} for v, t in zip(values, tokens)]
        return {"content": [{**alternatives[0], "top_logprobs": alternatives[:top]}]}

    def _answers(self, ids: Any, body: dict[str, Any]) -> list[tuple[str, int]]:
        import torch

        n, temperature = int(body.get("n") or 1), float(body.get("temperature") or 0)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        sampled = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
        torch.manual_seed(self.requests)
        out = self.model.generate(
            input_ids=ids.repeat(n, 1),
            attention_mask=torch.ones_like(ids).repeat(n, 1),
            max_new_tokens=int(body.get("max_tokens") or 16),
            pad_token_id=pad,
            **sampled,
        )
        new = out[:, ids.shape[1] :]
        return [(self.tokenizer.decode(row, skip_special_tokens=True), int((row != pad).sum())) for row in new]

    def complete(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import torch

        chat = path.endswith("/chat/completions")
        if chat:
            text = self.tokenizer.apply_chat_template(body["messages"], tokenize=False, add_generation_prompt=True)
        else:
            text = body["prompt"]
        with self.lock, torch.inference_mode():
            self.requests += 1
            ids = self._ids(text)
            wanted = self.logprobs and body.get("logprobs")
            first = self._first_token(ids, int(body.get("top_logprobs") or 0)) if wanted else None
            one_greedy = body.get("max_tokens") == 1 and not body.get("temperature") and int(body.get("n") or 1) == 1
            if first is not None and one_greedy:  # the answer is the most likely first token: no second pass
                answers = [(first["content"][0]["token"], 1)]
            else:
                answers = self._answers(ids, body)
        choices = []
        for index, (answer, _) in enumerate(answers):
            choice: dict[str, Any] = {"index": index, "finish_reason": "length", "logprobs": first}
            choice |= {"message": {"role": "assistant", "content": answer}} if chat else {"text": answer}
            choices.append(choice)
        usage = {"prompt_tokens": int(ids.shape[1]), "completion_tokens": sum(tokens for _, tokens in answers)}
        kind = "chat.completion" if chat else "text_completion"
        return {"id": f"r-{self.requests}", "object": kind, "model": self.name, "choices": choices, "usage": usage}


class ChosenServer:
    """The same API answering from chosen distributions instead of a model: `answer(messages)` gives the next
    token's probabilities ({token: p}) for a chat, and the reply carries them as `top_logprobs`, as vLLM's would.
    For tests that need a model whose answers are known exactly (the soft path of the ratings import)."""

    def __init__(self, name: str, answer: Callable[[list[dict[str, str]]], dict[str, float]]):
        self.name, self.answer = name, answer
        self.lock = threading.Lock()
        self.requests = 0

    def complete(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        chat = path.endswith("/chat/completions")
        messages = body["messages"] if chat else [{"role": "user", "content": body["prompt"]}]
        with self.lock:
            self.requests += 1
        probs = sorted(self.answer(messages).items(), key=lambda kv: -kv[1])[
            : max(int(body.get("top_logprobs") or 1), 1)
        ]
        alternatives = [{"token": token, "logprob": math.log(p)} for token, p in probs if p > 0]
        first = {"content": [{**alternatives[0], "top_logprobs": alternatives}]}
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": first}
        text = alternatives[0]["token"]
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        usage = {"prompt_tokens": sum(len(m["content"].split()) for m in messages), "completion_tokens": 1}
        kind = "chat.completion" if chat else "text_completion"
        return {"id": f"r-{self.requests}", "object": kind, "model": self.name, "choices": [choice], "usage": usage}


def handler_for(server: ModelServer | ChosenServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, value: Any) -> None:
            blob = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(blob)))
            self.end_headers()
            self.wfile.write(blob)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": server.name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path not in ("/v1/chat/completions", "/v1/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
            elif body.get("model") != server.name:
                self._send(404, {"error": {"message": f"no model {body.get('model')!r}"}})
            else:
                self._send(200, server.complete(self.path, body))

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler


def start(server: ModelServer | ChosenServer, port: int = 0) -> ThreadingHTTPServer:
    """Serve on 127.0.0.1 in a daemon thread; `httpd.server_address[1]` is the port."""
    httpd = ThreadingHTTPServer(("127.0.0.1", port), handler_for(server))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


if __name__ == "__main__":
    model = ModelServer(sys.argv[1], "model")
    httpd = start(model, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(f"http://127.0.0.1:{httpd.server_address[1]}/v1", flush=True)
    threading.Event().wait()
