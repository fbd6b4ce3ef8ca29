"""The scripted server's endpoints: OpenAI-compatible generation in vLLM's shapes, plus the
vLLM extras a recorder reads (/v1/models, /version, /tokenize, /health, /metrics) and the
ground-truth endpoints (/_sweeper/...).

:class:`ScriptedServer` runs inside whatever event loop starts it; :mod:`sweeper.testing.server`
wraps it in a thread or a process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sys
import time
import traceback
import zlib
from collections.abc import AsyncGenerator
from typing import Any

from sweeper.errors import ConfigError
from sweeper.testing.config import ScriptedServerConfig
from sweeper.testing.faults import BAD_USAGE, FAULT_HEADER, FaultPicker, Faults, split_points
from sweeper.testing.httpio import BadRequest, Connection, Request, read_request
from sweeper.testing.timing import NS_PER_S, BatchingEngine, schedule_chunks
from sweeper.testing.truth import EventKind, RequestTruth, TruthStore
from sweeper.testing.vllm_metrics import EngineState, PrefixCache, VllmMetrics

REQUEST_ID_HEADER = "x-request-id"
TOKEN_ID_SPACE = 32_000
DONE_EVENT = b"data: [DONE]\n\n"
COMMENT_EVENT = b": keep-alive\n\n\n"
MALFORMED_EVENT = b'data: {"id": "broken", "choices": [\n\n'
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    429: "RateLimitError",
}


class _Close(Exception):
    """Stop serving this connection (after a fault or a client that went away)."""


def count_words(text: str) -> int:
    """The toy tokenizer: one token per whitespace-separated word."""
    return len(text.split())


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(word.encode()) % TOKEN_ID_SPACE for word in text.split()]


def error_body(status: int, message: str) -> dict[str, Any]:
    """vLLM's error shape."""
    kind = _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _message_text(messages: Any) -> str:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    texts: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return " ".join(texts)


def _prompt_ids(body: dict[str, Any], chat: bool) -> list[int]:
    """The toy tokenizer's ids of a request's prompt (chat: its messages' texts, no template)."""
    if chat:
        return token_ids(_message_text(body.get("messages")))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return token_ids(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise BadRequest("'prompt' must be a string, a list of token ids, or a list of one of these")


class ScriptedServer:
    """The server; ``await start()`` in a running loop, then ``base_url``; ``await close()``."""

    def __init__(self, config: ScriptedServerConfig | None = None) -> None:
        self.config = config or ScriptedServerConfig()
        self.truths = TruthStore(self.config.truth_limit)
        self._faults = FaultPicker(self.config.faults, self.config.seed)
        self._engine: BatchingEngine | None = None
        self._active: set[RequestTruth] = set()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._counter = 0
        self.accepted_ns: list[int] = []  # when each connection was taken up (monotonic ns)
        self.port = self.config.port
        self.metrics = VllmMetrics(self.config, self._engine_state)
        self.prefix_cache = PrefixCache(self.config.block_size, self.config.num_blocks)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self.config.mode == "batching":
            self._engine = BatchingEngine(self.config, self._on_step)
        self._server = await asyncio.start_server(
            self._serve_connection, self.config.host, self.config.port, backlog=4096, limit=65_536
        )
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._engine is not None:
            await self._engine.close()

    def reset(self) -> None:
        """Forget the truth and the connections recorded so far."""
        self.truths.clear()
        self.accepted_ns.clear()

    # -- connection loop --------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self.accepted_ns.append(time.monotonic_ns())
        conn = Connection(reader, writer)
        try:
            while True:
                try:
                    request = await read_request(reader)
                except BadRequest as exc:
                    conn.send_json(400, error_body(400, str(exc)), {"connection": "close"})
                    break
                if request is None:
                    break
                await self._dispatch(conn, request)
                if not request.keep_alive:
                    break
        except (_Close, ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            # A bug of the server's, not a scripted fault: say so loudly, answer 500 if possible.
            traceback.print_exc(file=sys.stderr)
            with contextlib.suppress(Exception):
                conn.send_json(500, error_body(500, "scripted server bug; see its stderr"))
        finally:
            self._connections.discard(task)
            await conn.close()

    async def _dispatch(self, conn: Connection, request: Request) -> None:
        route = (request.method, request.path)
        try:
            if route == ("POST", "/v1/completions"):
                await self._generate(conn, request, chat=False)
            elif route == ("POST", "/v1/chat/completions"):
                await self._generate(conn, request, chat=True)
            elif route == ("GET", "/v1/models"):
                conn.send_json(200, self._models())
            elif route == ("GET", "/version"):
                conn.send_json(200, {"version": self.config.version})
            elif route == ("POST", "/tokenize"):
                conn.send_json(200, self._tokenize(request.json()))
            elif route == ("GET", "/health"):
                conn.send(200, b"", content_type="text/plain")
            elif route == ("GET", "/metrics"):
                conn.send(200, self.metrics.render(), content_type="text/plain; version=0.0.4")
            elif route == ("GET", "/_sweeper/truth"):
                self._send_truth(conn, request)
            elif route == ("POST", "/_sweeper/reset"):
                self.reset()
                conn.send_json(200, {"ok": True})
            elif route == ("GET", "/_sweeper/config"):
                conn.send_json(200, _config_dict(self.config))
            else:
                conn.send_json(404, error_body(404, f"no route {request.method} {request.path}"))
        except (BadRequest, ConfigError) as exc:
            conn.send_json(400, error_body(400, str(exc)))

    # -- small endpoints --------------------------------------------------------------------

    def _models(self) -> dict[str, Any]:
        card = {
            "id": self.config.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sweeper",
            "root": self.config.model,
            "parent": None,
            "max_model_len": self.config.max_model_len,
            "permission": [],
        }
        return {"object": "list", "data": [card]}

    def _tokenize(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise BadRequest("/tokenize needs a JSON object with 'prompt' or 'messages'")
        if "messages" in body:
            text = _message_text(body["messages"])
        elif isinstance(body.get("prompt"), str):
            text = body["prompt"]
        else:
            raise BadRequest("/tokenize needs 'prompt' (a string) or 'messages'")
        ids = token_ids(text)
        return {"count": len(ids), "max_model_len": self.config.max_model_len, "tokens": ids}

    def _send_truth(self, conn: Connection, request: Request) -> None:
        request_id = request.query.get("request_id")
        if request_id is None:
            try:
                since_ns = int(request.query.get("since_ns", "0"))
                until_ns = int(request.query.get("until_ns", str(2**63)))
            except ValueError as exc:
                raise BadRequest(f"since_ns / until_ns must be integers: {exc}") from exc
            items = [t.to_dict() for t in self.truths.all() if since_ns <= t.received_ns < until_ns]
            conn.send_json(200, {"requests": items})
            return
        truth = self.truths.get(request_id)
        if truth is None:
            conn.send_json(404, error_body(404, f"no truth for request id {request_id!r}"))
        else:
            conn.send_json(200, truth.to_dict())

    def _engine_state(self) -> EngineState:
        if self._engine is not None:
            engine = self._engine
            return EngineState(
                len(engine.running), len(engine.waiting), engine.kv_usage, engine.stats.preemptions
            )
        block = self.config.block_size
        used = sum(-(-(t.prompt_tokens + t.completion_tokens) // block) for t in list(self._active))
        usage = min(1.0, used / self.config.num_blocks)
        return EngineState(len(self._active), 0, usage, 0)

    def _on_step(self, step_tokens: int, _produced: int) -> None:
        self.metrics.iteration_tokens.observe(step_tokens)

    # -- generation -------------------------------------------------------------------------

    def _new_id(self, chat: bool) -> str:
        self._counter += 1
        return f"{'chatcmpl' if chat else 'cmpl'}-{self._counter:08x}"

    def _check_body(self, body: Any, chat: bool) -> tuple[list[int], int, int]:
        """(prompt token ids, max tokens, tokens to produce) or BadRequest."""
        config = self.config
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        rejected = [name for name in config.reject_params if name in body]
        if rejected:
            raise _Rejected(rejected, config.reject_status)
        model = body.get("model")
        if model is not None and model != config.model:
            raise _NotFound(f"The model `{model}` does not exist.")
        if body.get("n", 1) != 1:
            raise BadRequest("the scripted server supports n=1 only")
        ids = _prompt_ids(body, chat)
        prompt = len(ids)
        max_tokens = body.get("max_completion_tokens") if chat else None
        max_tokens = max_tokens if max_tokens is not None else body.get("max_tokens")
        if max_tokens is None:
            max_tokens = config.max_model_len - prompt
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if prompt + max_tokens > config.max_model_len:
            raise BadRequest(
                f"This model's maximum context length is {config.max_model_len} tokens. However, "
                f"you requested {prompt + max_tokens} tokens ({prompt} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion."
            )
        produce = max_tokens
        min_tokens = int(body.get("min_tokens") or 0)
        if config.natural_len is not None and not body.get("ignore_eos", False):
            produce = min(max_tokens, max(config.natural_len, min_tokens))
        return ids, max_tokens, produce

    def _token_source(self, truth: RequestTruth, produce: int) -> AsyncGenerator[int, None]:
        if self._engine is not None:
            return self._engine.generate(truth, produce)
        return schedule_chunks(self.config, truth, produce)

    def _text(self, start: int, count: int) -> str:
        vocab = self.config.vocabulary
        return "".join(" " + vocab[(start + i) % len(vocab)] for i in range(count))

    async def _generate(self, conn: Connection, request: Request, chat: bool) -> None:
        header_id = request.headers.get(REQUEST_ID_HEADER)
        request_id = header_id or self._new_id(chat)
        body = request.json()
        stream = bool(isinstance(body, dict) and body.get("stream"))
        truth = RequestTruth(
            request_id=request_id,
            endpoint="chat" if chat else "completions",
            stream=stream,
            received_ns=request.received_ns,
        )
        self.truths.add(truth)
        id_header = {REQUEST_ID_HEADER: request_id}
        try:
            faults = self._faults.pick(request.headers.get(FAULT_HEADER))
            truth.faults = faults.spec
            ids, truth.max_tokens, produce = self._check_body(body, chat)
            truth.prompt_tokens = len(ids)
        except (BadRequest, ConfigError, _Rejected, _NotFound) as exc:
            status = exc.status if isinstance(exc, _Rejected | _NotFound) else 400
            truth.status, truth.http_status = "rejected", status
            t_ns = conn.send_json(status, error_body(status, str(exc)), id_header)
            truth.add_event("body", t_ns)
            return
        if faults.delay_ms:
            await asyncio.sleep(faults.delay_ms / 1000)
        if faults.reset or faults.close:
            truth.status = "fault"
            if faults.reset:
                conn.reset()
            raise _Close
        if faults.echo_auth:
            status = faults.http_status or 401
            truth.status, truth.http_status = "fault", status
            message = _echoed_credentials(request.headers)
            truth.add_event("body", conn.send_json(status, error_body(status, message), id_header))
            return
        if faults.http_status is not None:
            status = faults.http_status
            headers = dict(id_header)
            if status == 429:
                headers["retry-after"] = f"{faults.retry_after_s:g}"
            truth.status, truth.http_status = "fault", status
            message = f"injected fault: HTTP {status}"
            truth.add_event("body", conn.send_json(status, error_body(status, message), headers))
            return
        self._look_up_prefix(truth, ids)
        self._active.add(truth)
        try:
            if stream:
                await _StreamWriter(self, conn, truth, body, chat, faults, id_header).run(produce)
            else:
                await self._respond_whole(conn, truth, body, chat, produce, id_header, faults)
            if self.config.prefix_caching and truth.status == "ok":
                # The answer's blocks are cached too: the next turn of a conversation hits them.
                self.prefix_cache.insert(ids + token_ids(self._text(0, truth.completion_tokens)))
        finally:
            self._active.discard(truth)

    def _look_up_prefix(self, truth: RequestTruth, ids: list[int]) -> None:
        self.metrics.prefix_queries += len(ids)
        if self.config.prefix_caching:
            truth.cached_tokens = self.prefix_cache.lookup(ids)
            self.metrics.prefix_hits += truth.cached_tokens

    def _observe_finished(self, truth: RequestTruth) -> None:
        metrics = self.metrics
        # The engine stamps its own finish (batching mode); otherwise the request ends now.
        end = truth.finished_ns = truth.finished_ns or time.monotonic_ns()
        admitted = truth.admitted_ns or truth.received_ns
        first = truth.first_token_ns or end
        metrics.queue_time.observe((admitted - truth.received_ns) / NS_PER_S)
        metrics.prefill_time.observe((first - admitted) / NS_PER_S)
        metrics.decode_time.observe((end - first) / NS_PER_S)
        metrics.ttft.observe((first - truth.received_ns) / NS_PER_S)
        metrics.e2e_latency.observe((end - truth.received_ns) / NS_PER_S)
        metrics.prompt_tokens += truth.prompt_tokens
        metrics.request_finished(truth.finish_reason or "abort")

    async def _respond_whole(
        self,
        conn: Connection,
        truth: RequestTruth,
        body: dict[str, Any],
        chat: bool,
        produce: int,
        headers: dict[str, str],
        faults: Faults,
    ) -> None:
        produced = 0
        async with contextlib.aclosing(self._token_source(truth, produce)) as source:
            async for count in source:
                produced += count
        truth.completion_tokens = produced
        self.metrics.generation_tokens += produced
        truth.finish_reason = "length" if produced >= truth.max_tokens else "stop"
        text = self._text(0, produced)
        usage = _final_usage(truth.prompt_tokens, produced, faults)
        created = int(time.time())
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": truth.finish_reason,
        }
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
            obj = "chat.completion"
        else:
            choice["text"] = text
            obj = "text_completion"
        choice["stop_reason"] = None
        response = {
            "id": truth.request_id,
            "object": obj,
            "created": created,
            "model": self.config.model,
            "choices": [choice],
            "usage": usage,
        }
        if faults.timings_inf:
            response["timings"] = _timings_inf(truth, produced)
        truth.status = "ok"
        self._observe_finished(truth)
        truth.add_event("body", conn.send_json(200, response, headers), produced)


class _Rejected(Exception):
    def __init__(self, names: list[str], status: int) -> None:
        self.status = status
        super().__init__(
            f"unsupported parameter(s): {', '.join(names)}; this server does not accept "
            f"{' or '.join(repr(n) for n in names)}"
        )


class _NotFound(Exception):
    status = 404


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }


def _final_usage(prompt: int, completion: int, faults: Faults) -> dict[str, Any]:
    """The request's last usage: right, or with every count bad (fault ``usage=BAD``)."""
    usage: dict[str, Any] = _usage(prompt, completion)
    if faults.bad_usage is not None:
        usage = dict.fromkeys(usage, BAD_USAGE[faults.bad_usage])
    return usage


def _timings_inf(truth: RequestTruth, produced: int) -> dict[str, float]:
    """llama.cpp's ``timings`` as a server writes them when the prompt took no measurable time:
    ``prompt_per_second`` is a division by zero, Infinity (fault ``timings_inf``)."""
    first = truth.first_token_ns or time.monotonic_ns()
    predicted_ms = max(time.monotonic_ns() - first, 0) / 1e6
    return {
        "prompt_n": truth.prompt_tokens,
        "prompt_ms": 0.0,
        "prompt_per_token_ms": 0.0,
        "prompt_per_second": float("inf"),
        "predicted_n": produced,
        "predicted_ms": predicted_ms,
        "predicted_per_token_ms": predicted_ms / produced if produced else 0.0,
        "predicted_per_second": produced / predicted_ms * 1000 if predicted_ms else float("inf"),
    }


def _echoed_credentials(headers: dict[str, str]) -> str:
    """A careless server's 401 message: the credentials it was sent, verbatim (``echo_auth``)."""
    sent = [f"{name}: {headers[name]}" for name in ("authorization", "api-key") if name in headers]
    return f"Incorrect API key provided ({'; '.join(sent) or '(none)'}); check your credentials"


def _config_dict(config: ScriptedServerConfig) -> dict[str, Any]:
    data = dataclasses.asdict(config)
    data["faults"] = [dataclasses.asdict(rule) for rule in config.faults]
    return data


class _StreamWriter:
    """Writes one streamed response: SSE events in vLLM's shapes, faults applied, truth stamped."""

    def __init__(
        self,
        server: ScriptedServer,
        conn: Connection,
        truth: RequestTruth,
        body: dict[str, Any],
        chat: bool,
        faults: Faults,
        headers: dict[str, str],
    ) -> None:
        self.server = server
        self.conn = conn
        self.truth = truth
        self.chat = chat
        self.faults = faults
        self.headers = headers
        options = body.get("stream_options") or {}
        self.include_usage = bool(options.get("include_usage"))
        self.continuous_usage = self.include_usage and bool(options.get("continuous_usage_stats"))
        self.split_delay_s = server.config.split_delay_ms / 1000
        self._events = 0
        model = json.dumps(server.config.model)
        created = int(time.time())
        head = f'{{"id":{json.dumps(truth.request_id)},"object":'
        if chat:
            head += f'"chat.completion.chunk","created":{created},"model":{model},"choices":'
            self._choice_open = '[{"index":0,"delta":{"content":'
            self._choice_close = '},"logprobs":null,"finish_reason":'
            self._choice_tail = "}]"
        else:
            head += f'"text_completion","created":{created},"model":{model},"choices":'
            self._choice_open = '[{"index":0,"text":'
            self._choice_close = ',"logprobs":null,"finish_reason":'
            self._choice_tail = ',"stop_reason":null}]'
        self._head = head

    def _event(
        self,
        choices: str,
        usage: dict[str, Any] | None,
        timings: dict[str, float] | None = None,
    ) -> bytes:
        tail = ""
        if timings is not None:
            tail += f',"timings":{json.dumps(timings, separators=(",", ":"))}'
        if usage is not None:
            tail += f',"usage":{json.dumps(usage, separators=(",", ":"))}'
        return ("data: " + self._head + choices + tail + "}\n\n").encode()

    def _content_event(self, text: str, finish: str | None, completion: int) -> bytes:
        choices = (
            self._choice_open
            + json.dumps(text, ensure_ascii=False)
            + self._choice_close
            + (json.dumps(finish) if finish else "null")
            + self._choice_tail
        )
        usage = _usage(self.truth.prompt_tokens, completion) if self.continuous_usage else None
        timings = None
        if finish and self.faults.timings_inf:
            timings = _timings_inf(self.truth, completion)
        return self._event(choices, usage, timings)

    async def _write(self, kind: EventKind, payload: bytes, tokens: int = 0) -> None:
        conn = self.conn
        if conn.gone:
            self.truth.status = "disconnected"
            raise _Close
        transport = conn.transport
        if self.faults.comments:
            self.truth.add_event("comment", time.monotonic_ns())
            transport.write(conn.frame(COMMENT_EVENT))
        data = conn.frame(payload)
        if self.faults.split_seed is not None:
            self._events += 1
            start = 0
            for point in split_points(data, self.faults.split_seed + self._events):
                transport.write(data[start:point])
                start = point
                await asyncio.sleep(self.split_delay_s)
            data = data[start:]
        t_ns = time.monotonic_ns()
        transport.write(data)
        self.truth.add_event(kind, t_ns, tokens)
        await conn.drain_if_needed()

    async def _cut(self) -> None:
        self.truth.status = "fault"
        await self.conn.close()
        raise _Close

    async def run(self, produce: int) -> None:
        truth, faults, server = self.truth, self.faults, self.server
        truth.add_event("headers", self.conn.start_chunked(200, self.headers))
        if faults.stall_ms and faults.stall_after == 0:
            await asyncio.sleep(faults.stall_ms / 1000)
        if self.chat:
            usage = _usage(truth.prompt_tokens, 0) if self.continuous_usage else None
            role = '[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            await self._write("role", self._event(role + '"finish_reason":null}]', usage))
        chunks = produced = 0
        last_ns = 0
        itl = server.metrics.itl
        async with contextlib.aclosing(server._token_source(truth, produce)) as source:
            async for count in source:
                finish = None
                if produced + count >= produce:
                    finish = "length" if produce >= truth.max_tokens else "stop"
                    truth.finish_reason = finish
                text = server._text(produced, count)
                produced += count
                truth.completion_tokens = produced
                await self._write("content", self._content_event(text, finish, produced), count)
                now_ns = truth.event_ns[-1]
                if last_ns:
                    itl.observe((now_ns - last_ns) / NS_PER_S)
                last_ns = now_ns
                chunks += 1
                server.metrics.generation_tokens += count
                if faults.cut_after == chunks:
                    await self._cut()
                if faults.malformed_after == chunks:
                    await self._write("malformed", MALFORMED_EVENT)
                if faults.error_after == chunks:
                    truth.status = "fault"
                    error = error_body(500, "injected fault: error inside the stream")
                    await self._write("error", f"data: {json.dumps(error)}\n\n".encode())
                    await self._write("done", DONE_EVENT)
                    self.conn.end_chunked()
                    return
                if faults.stall_ms and faults.stall_after == chunks:
                    await asyncio.sleep(faults.stall_ms / 1000)
        if self.include_usage and not faults.no_usage:
            usage = _final_usage(truth.prompt_tokens, produced, faults)
            await self._write("usage", self._event("[]", usage))
        if not faults.no_done:
            await self._write("done", DONE_EVENT)
        self.conn.end_chunked()
        # A stream that ran to its end is "ok" even when it had comments, splits or no [DONE].
        truth.status = "ok"
        server._observe_finished(truth)
