"""A small real OpenAI-compatible server for the tests: /v1/models, /v1/chat/completions and /v1/completions over
a transformers causal LM, with `logprobs`/`top_logprobs` of the first answer token, on loopback.

Why not `transformers serve`: its chat and completion handlers ignore `logprobs` and `top_logprobs` (listed as
unused fields in transformers 5.x), so it cannot show the path a logprob-giving server (vLLM, llama.cpp) takes.
This one answers as those do, from the same weights; `logprobs=False` makes it a server that gives none (the
sampling fallback). `python -m csts_pipeline.testing.openai_server FOLDER [PORT]` serves a model folder until killed.

`FakeServer` (`fake_server(mode)`) is the other kind: no model, answers that misbehave on purpose as a user's vLLM,
llama.cpp or hosted endpoint sometimes does (`FAULTS`: silent, HTML, no `choices`, logprobs out of range, mass off
the options, chatty samples, `n` ignored, logprobs dropped mid-run, Retry-After, slow after a number of requests),
each request counted."""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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


# ------------------------------------------------------------------------------ a server that misbehaves on purpose

HANG = "hang"  # a reply that never comes


@dataclass
class Reply:
    """What the fake server sends: a status, a JSON value (or bytes as they are) and headers."""

    body: Any = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def question(body: dict[str, Any]) -> str:
    """Which question a request asks, from its prompt: yes_no, digit, or text (a draft, a raw completion)."""
    system = " ".join(m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system")
    return "yes_no" if "yes or no" in system else "digit" if "one digit" in system else "text"


def completion(texts: list[str], top: list[tuple[str, float]] | None = None, **extra: Any) -> dict[str, Any]:
    """A chat completion with one choice per text, the first token's `top_logprobs` when `top` is given."""
    logprobs = None
    if top is not None:
        alternatives = [{"token": token, "logprob": value} for token, value in top]
        logprobs = {"content": [{**alternatives[0], "top_logprobs": alternatives}]}
    choices = [
        {"index": i, "message": {"role": "assistant", "content": text}, "logprobs": logprobs, "finish_reason": "stop"}
        for i, text in enumerate(texts)
    ]
    usage = {"prompt_tokens": 50, "completion_tokens": len(texts)}
    return {"id": "r", "object": "chat.completion", "model": "fake", "choices": choices, "usage": usage, **extra}


WELL = {  # a well-behaved answer's top tokens: most of the mass on the options
    "yes_no": [("yes", math.log(0.7)), ("no", math.log(0.25)), ("The", math.log(0.05))],
    "digit": [("4", math.log(0.6)), ("3", math.log(0.3)), ("The", math.log(0.1))],
}
SAID = {"yes_no": "yes", "digit": "4", "text": "The weather."}


def well_behaved(body: dict[str, Any], top: dict[str, list] | None = None, said: dict[str, str] | None = None) -> Reply:
    """An answer as vLLM gives it: logprobs when asked (from `top`), `n` samples (from `said`), text for a draft."""
    kind, top, said = question(body), top or WELL, said or SAID
    if "prompt" in body:
        return Reply({"id": "r", "object": "text_completion", "choices": [{"index": 0, "text": " 4"}]})
    n = int(body.get("n") or 1)
    if body.get("logprobs") and kind in top:
        return Reply(completion([top[kind][0][0]], top[kind]))
    return Reply(completion([said[kind]] * n))


def _top(kind_values: dict[str, list[tuple[str, float]]]) -> Callable[[FakeServer, dict], Reply]:
    return lambda server, body: well_behaved(body, top=kind_values)


def _samples(texts: dict[str, str], logprobs: bool = False, one: bool = False) -> Callable[[FakeServer, dict], Reply]:
    """No logprobs; each sample reads `texts[question]`; `one`: a server that ignores `n` and sends one."""

    def reply(server: FakeServer, body: dict[str, Any]) -> Reply:
        kind = question(body)
        n = 1 if one else int(body.get("n") or 1)
        return Reply(completion([texts.get(kind, SAID[kind])] * n))

    return reply


def _drops_logprobs(server: FakeServer, body: dict[str, Any]) -> Reply:
    """Logprobs for the first 6 requests, then none (as a server restarted with other settings mid-run)."""
    if body.get("logprobs") and server.posts <= 6:
        return well_behaved(body)
    return Reply(completion([SAID[question(body)]] * int(body.get("n") or 1)))


def _retry_after(server: FakeServer, body: dict[str, Any]) -> Reply:
    """503 with `Retry-After: <server.retry_after>` to the first request, then answers."""
    if server.posts == 1:
        return Reply({"error": "busy"}, 503, {"Retry-After": str(server.retry_after)})
    return well_behaved(body)


def _slow_after(server: FakeServer, body: dict[str, Any]) -> Reply:
    """The first `server.quick` requests answered at once, later ones after `server.delay` s (a server that slows
    down mid-run), counted apart from `posts` under the lock so that concurrent requests never share a number."""
    with server.lock:
        server.answered += 1
        number = server.answered
    if number > server.quick:
        server.released.wait(server.delay)
    return well_behaved(body)


HTML = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
FAULTS: dict[str, Callable[[FakeServer, dict], Reply | str]] = {
    "well": lambda server, body: well_behaved(body),
    "silent": lambda server, body: HANG,
    "html": lambda server, body: Reply(HTML, headers={"Content-Type": "text/html"}),
    "no_choices": lambda server, body: Reply({"id": "r", "object": "chat.completion", "usage": {}}),
    "logprob_800": _top({"digit": [("4", 800.0), ("3", -1.0)], "yes_no": [("yes", 800.0), ("no", -1.0)]}),
    "infinite": _top({"digit": [("4", math.inf), ("3", -1.0)], "yes_no": [("yes", math.inf), ("no", -1.0)]}),
    "nan": _top({"digit": [("4", math.nan), ("3", -1.0)], "yes_no": [("yes", math.nan), ("no", -1.0)]}),
    "no_option_logprobs": _top(
        {k: [("The", math.log(0.5)), ("Sure", math.log(0.3)), ("I", math.log(0.2))] for k in WELL}
    ),
    "mass_on_the": _top({"digit": [("The", math.log(0.99)), ("4", math.log(0.01))], "yes_no": WELL["yes_no"]}),
    "chatty": _samples({"digit": "Sure! The answer", "yes_no": "Sure! The answer"}),
    "rating_text": _samples({"digit": "Rating: 4", "yes_no": "Answer: yes"}),
    "ignores_n": _samples({}, one=True),
    "drops_logprobs": _drops_logprobs,
    "retry_after": _retry_after,
    "slow_after": _slow_after,
}


class FakeServer:
    """An OpenAI-compatible server with no model that misbehaves on purpose: POSTs are answered by
    `FAULTS[mode]`, `GET /v1/models` with `models` (default: one model, `created` and the chat replies'
    `system_fingerprint` from the attributes); requests are counted."""

    def __init__(self, mode: str = "well", models: Any = None, name: str = "fake-model"):
        self.mode, self.models, self.name = mode, models, name
        self.created: int | None = None
        self.fingerprint: str | None = None
        self.retry_after = 1
        self.quick, self.delay, self.answered = 0, 0.0, 0  # slow_after: requests answered at once, then the delay
        self.posts = 0
        self.gets = 0
        self.lock = threading.Lock()
        self.released = threading.Event()  # set: hung requests end (closed without a reply)

    def listing(self) -> Any:
        if self.models is not None:
            return self.models
        card: dict[str, Any] = {"id": self.name, "object": "model", "owned_by": "tests"}
        if self.created is not None:
            card["created"] = self.created
        return {"object": "list", "data": [card]}

    def answer(self, body: dict[str, Any]) -> Reply | str:
        with self.lock:
            self.posts += 1
        found = FAULTS[self.mode](self, body)
        if isinstance(found, Reply) and isinstance(found.body, dict) and self.fingerprint:
            found.body["system_fingerprint"] = self.fingerprint
        return found


def fake_handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, reply: Reply) -> None:
            blob = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            headers = {"Content-Type": "application/json", **reply.headers, "Content-Length": str(len(blob))}
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(blob)

        def do_GET(self) -> None:
            server.gets += 1
            self._send(Reply(server.listing()) if self.path.rstrip("/") == "/v1/models" else Reply({}, 404))

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            found = server.answer(body)
            if found == HANG:
                server.released.wait(120)
                self.close_connection = True
                return
            assert isinstance(found, Reply)
            self._send(found)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

    return Handler


@contextlib.contextmanager
def fake_server(mode: str = "well", models: Any = None) -> Iterator[tuple[str, FakeServer]]:
    """(base URL, server) of a FakeServer on 127.0.0.1 for the `with` block."""
    server = FakeServer(mode, models)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), fake_handler(server))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", server
    finally:
        server.released.set()
        httpd.shutdown()
        httpd.server_close()


if __name__ == "__main__":
    model = ModelServer(sys.argv[1], "model")
    httpd = start(model, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(f"http://127.0.0.1:{httpd.server_address[1]}/v1", flush=True)
    threading.Event().wait()
