"""The HTTP side of an OpenAI-compatible server, standard library only, so a misbehaving server is never a hang
nor a traceback: each request has a deadline for all its tries and waits together (`--timeout`, default 60 s) and
the run one more (`--run-timeout`); 429/5xx, connection failures and malformed replies (not JSON, no `choices`)
are retried with backoff (1, 2, 4, 8 s, or the server's `Retry-After`) inside that deadline; the last failure is
one line naming the URL, what was waited for and the first bytes of the reply. A wait of more than 10 s is
reported while it lasts (the `csts_pipeline` log)."""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Any

from csts_pipeline.pipeline.errors import UserError
from csts_pipeline.pipeline.language_model.base import Unfinished
from csts_pipeline.pipeline.model_spec import ModelSpec

log = logging.getLogger(__name__)
RETRIES = 4  # after the first try
PROGRESS_S = 10.0  # a wait longer than this is reported, and again every as long
SHOWN_BYTES = 80  # of a malformed reply, in the error
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
Check = Callable[[Any], str | None]  # a reply's shape problem, or None


class _Failure(Exception):
    """One failed try: why, whether another try can help, and the wait the server asked for."""

    def __init__(self, reason: str, retryable: bool = True, retry_after: float | None = None, kind: str = "reply"):
        super().__init__(reason)
        self.reason, self.retryable, self.retry_after, self.kind = reason, retryable, retry_after, kind


def first_bytes(raw: bytes) -> str:
    """The start of a reply, on one line, for an error message."""
    text = raw[:SHOWN_BYTES].decode(errors="replace")
    return repr(" ".join(text.split()) + ("..." if len(raw) > SHOWN_BYTES else ""))


def _retry_after(headers: Any) -> float | None:
    """`Retry-After` in seconds (a number or an HTTP date), or None."""
    value = (headers.get("Retry-After") or "").strip() if headers is not None else ""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:  # an HTTP date
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _read_body(response: Any, deadline: float) -> bytes:
    """The whole body, a chunk at a time, so a server that trickles bytes still meets the deadline."""
    chunks = []
    while chunk := response.read1(65536):
        chunks.append(chunk)
        if time.monotonic() > deadline:
            raise _Failure("the reply did not finish in time", kind="timeout")
    return b"".join(chunks)


class ServerConnection:
    """Requests to one server's /v1 API, bounded in time, with the API key from the environment."""

    def __init__(self, spec: ModelSpec):
        base = (spec.endpoint or "").rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.spec = spec
        self.run_deadline = None if spec.run_timeout is None else time.monotonic() + spec.run_timeout
        self.stop = threading.Event()  # a request failed for good: the others stop retrying
        self.failure: UserError | None = None  # the first request that failed for good: the error shown

    def _once(self, url: str, body: dict[str, Any] | None, deadline: float) -> tuple[Any, bytes]:
        """One try: the parsed reply and its bytes, or a _Failure."""
        headers = {"Content-Type": "application/json"}
        if key := self.spec.api_key():
            headers["Authorization"] = f"Bearer {key}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=max(deadline - time.monotonic(), 0.05)) as response:
                raw, kind = _read_body(response, deadline), response.headers.get("Content-Type") or "no Content-Type"
        except urllib.error.HTTPError as exc:
            detail = first_bytes(exc.read() or b"")
            retry = exc.code in _RETRY_STATUS
            raise _Failure(f"{exc.code} {exc.reason}: {detail}", retry, _retry_after(exc.headers), "http") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise _Failure("no reply", kind="timeout") from None
            raise _Failure(f"failed ({reason or type(reason).__name__})", kind="connect") from None
        try:
            return json.loads(raw), raw
        except ValueError:
            raise _Failure(f"a reply that is not JSON ({kind}): {first_bytes(raw)}") from None

    def request(self, path: str, body: dict[str, Any] | None = None, check: Check | None = None, **how: Any) -> Any:
        """GET (no body) or POST `path`, retried within the deadline (`limit` s, default --timeout; `tries`);
        the last failure is a one-line UserError, after which the other requests of the batch stop."""
        if self.stop.is_set():
            raise UserError(f"{self.base}{path}: not asked, another request failed")
        try:
            return self._tries(path, body, check, how.get("limit") or self.spec.timeout, how.get("tries", RETRIES + 1))
        except UserError as exc:
            if not self.stop.is_set():
                self.failure = exc
            self.stop.set()
            raise

    def _tries(self, path: str, body: dict[str, Any] | None, check: Check | None, limit: float, tries: int) -> Any:
        url = self.base + path
        what = f"{'GET' if body is None else 'POST'} {url}"
        deadline = time.monotonic() + limit
        if self.run_deadline is not None and self.run_deadline < deadline:
            deadline, limit = self.run_deadline, -1.0  # -1: the run's deadline is the nearer
        for attempt in range(tries):
            try:
                value, raw = self._once(url, body, deadline)
                problem = check(value) if check else None
                if problem:
                    raise _Failure(f"{problem}: {first_bytes(raw)}")
                return value
            except _Failure as failure:
                wait_s = failure.retry_after if failure.retry_after is not None else 2.0**attempt
                if failure.kind == "timeout" or (failure.retryable and time.monotonic() + wait_s >= deadline):
                    raise UserError(self._late(what, limit, failure, attempt + 1)) from None
                if not failure.retryable or attempt + 1 == tries:
                    raise UserError(self._failed(what, failure, attempt + 1)) from None
                asked = " (its Retry-After)" if failure.retry_after is not None else ""
                log.info("%s: %s; trying again in %.0f s%s", what, failure.reason, wait_s, asked)
                if self.stop.wait(wait_s):
                    raise UserError(f"{what}: given up, another request failed") from None
        raise AssertionError("unreachable")

    def _failed(self, what: str, failure: _Failure, tries: int) -> str:
        if failure.kind == "connect" and what.startswith("GET"):
            return f"endpoint {self.base} cannot be reached ({failure.reason.removeprefix('failed (')[:-1]})"
        return f"endpoint {what}: {failure.reason}" + (f" ({tries} tries)" if tries > 1 else "")

    def _late(self, what: str, limit: float, failure: _Failure, tries: int) -> str:
        """The deadline passed waiting for `what`: which deadline, and the last thing that happened."""
        if limit < 0:
            bound = f"the run's {self.spec.run_timeout:g} s (--run-timeout)"
        else:
            bound = f"{limit:g} s ({'--timeout' if what.startswith('POST') else 'the first contact'})"
        if failure.retry_after is not None and failure.kind != "timeout":
            last = f"{failure.reason}, and it asks to wait {failure.retry_after:g} s more (Retry-After)"
        else:
            last = failure.reason
        counted = f"{tries} {'try' if tries == 1 else 'tries'}"
        return f"endpoint {what}: no answer within {bound} waiting for a reply, {counted}; the last: {last}"

    def post_all(self, path: str, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST every body, `batch_size` at a time, the replies in order; reported while waiting. When one fails
        for good (or the run's deadline passes), `Unfinished` carries the replies that did come back."""
        check = _chat_problem if path.endswith("/chat/completions") else _completion_problem
        self.stop.clear()  # a new batch: the stop of an earlier failed one (caught by a caller) is over
        self.failure = None
        pool = ThreadPoolExecutor(self.spec.batch_size)
        futures = [pool.submit(self.request, path, body, check) for body in bodies]
        try:
            self._wait(futures, self.base + path)
            return [future.result() for future in futures]
        except UserError as exc:
            self.stop.set()
            pool.shutdown(wait=True, cancel_futures=True)  # the requests in flight end: their replies count
            done = {i: f.result() for i, f in enumerate(futures) if not f.cancelled() and f.exception() is None}
            raise Unfinished(str(exc), done) from None
        finally:
            self.stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def _wait(self, futures: list[Future], url: str) -> None:
        """Until every request is done, or one failed for good (then the others stop retrying)."""
        started, pending = time.monotonic(), set(futures)
        while pending:
            done, pending = wait(pending, timeout=PROGRESS_S, return_when=FIRST_EXCEPTION)
            failed = next((f.exception() for f in done if f.exception() is not None), None)
            if failed is not None:
                self.stop.set()
                raise self.failure or failed
            if pending:
                waited = time.monotonic() - started
                log.info(
                    "endpoint %s: waiting for %d of %d replies, %.0f s so far (each may take %g s, --timeout)",
                    url, len(pending), len(futures), waited, self.spec.timeout,
                )  # fmt: skip


def _choices(reply: Any) -> str | list[dict[str, Any]]:
    if not isinstance(reply, dict):
        return f"a reply that is a JSON {type(reply).__name__}, not an object"
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
        return "a reply without `choices`"
    return choices


def _chat_problem(reply: Any) -> str | None:
    """What makes a chat completion unreadable (every choice needs a `message`), or None."""
    choices = _choices(reply)
    if isinstance(choices, str):
        return choices
    if not all(isinstance(c.get("message"), dict) for c in choices):
        return "a chat reply whose `choices` hold no `message`"
    return None


def _completion_problem(reply: Any) -> str | None:
    choices = _choices(reply)
    if isinstance(choices, str):
        return choices
    return None if all(isinstance(c.get("text"), str) for c in choices) else "a reply whose `choices` hold no `text`"


def served_models(http: ServerConnection) -> dict[str, dict[str, Any]]:
    """id -> what `GET /v1/models` says of each model; the first contact, one try with a short deadline, so a dead
    server fails in seconds; a list of another shape is a one-line error."""
    limit = min(http.spec.connect_timeout, http.spec.timeout)
    listed = http.request("/models", None, _models_problem, limit=limit, tries=1)
    served = {e["id"]: e for e in listed["data"] if isinstance(e, dict) and isinstance(e.get("id"), str) and e["id"]}
    if not served and http.spec.model is None:
        raise UserError(f"endpoint {http.base}: lists no model; name one with --model")
    return served


def _models_problem(listed: Any) -> str | None:
    if not isinstance(listed, dict):
        return f"a model list that is a JSON {type(listed).__name__}, not an object with `data`"
    if not isinstance(listed.get("data"), list):
        return f"a model list whose `data` is {json.dumps(listed.get('data'))[:20]}, not a list"
    return None
