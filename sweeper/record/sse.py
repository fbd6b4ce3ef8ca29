"""Server-sent events, parsed from raw bytes, and OpenAI stream chunks, read for tokens.

Pure code: no I/O, no clock. :class:`SSEParser` takes the bytes of each network read as they
come (a line or a multi-byte UTF-8 character may be split across reads) and returns the events
completed by that read. :class:`ChunkReader` turns each event's JSON into what the recorder
stores: whether the chunk carried tokens and how many, the finish reason, the usage.

Token counts never come from text: a random or byte-level model streams chunks whose text is
``""`` or ``"\\ufffd"`` and yet each is a token. Counts come, in order of preference, from the
chunk's ``token_ids`` (vLLM ``return_token_ids``), from running usage on every chunk (vLLM
``stream_options.continuous_usage_stats``), or else one token per chunk that has content.
"""

from __future__ import annotations

import codecs
import json
import json.scanner
from dataclasses import dataclass, field
from typing import Any

DONE_MARKER = "[DONE]"
# The token counts of a usage object: each, when present, must be a whole number >= 0.
USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
# json's C scanner, called directly (typeshed types make_scanner's argument wrongly)
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _decode(data: str) -> Any:
    """``json.loads(data)`` for a stripped line: the C scanner alone (no whitespace regexes,
    no wrappers); anything it does not take whole goes to ``json.loads``, for its error."""
    try:
        obj, end = _scan(data, 0)
    except StopIteration:
        return json.loads(data)  # raises the JSONDecodeError that says where and why
    if end != len(data):
        return json.loads(data)
    return obj


@dataclass
class SSEEvent:
    """One dispatched event: its ``data`` lines joined with newlines, and its ``event`` name."""

    data: str
    event: str = "message"


class SSEParser:
    """Incremental SSE parser (the WHATWG event-stream grammar, the parts servers use).

    Lines end with CRLF, LF or CR; ``:`` starts a comment (a keep-alive); a blank line
    dispatches the event; an event with no data line is dropped, so blank keep-alive lines
    produce nothing.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = False  # the decoder holds the start of a character
        self._buffer = ""
        self._data: list[str] = []
        self._event = ""
        self._pending_cr = False
        self.comments = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse one network read; return the events it completed."""
        text = self._text(chunk)
        if not text:
            return []
        if self._pending_cr:
            # A CR at the end of the previous read may be the first half of a CRLF.
            self._pending_cr = False
            if text.startswith("\n"):
                text = text[1:]
        if (
            not self._buffer
            and not self._data
            and not self._event
            and text.endswith("\n\n")
            and "\r" not in text
        ):
            # The common read: whole ``data: ...`` events, nothing pending. What the general
            # path below would make of it, without its line-by-line work.
            if text.startswith("data: ") and text.find("\n") == len(text) - 2:
                return [SSEEvent(text[6:-2])]  # one event
            parts = text[:-2].split("\n\n")
            if all(p.startswith("data: ") and "\n" not in p for p in parts):
                return [SSEEvent(p[6:]) for p in parts]
        self._buffer += text
        return self._drain()

    def _text(self, chunk: bytes) -> str:
        """The read's text: at once when nothing is pending and it is whole UTF-8 (the common
        read), else through the incremental decoder (a character split across reads, bad
        bytes replaced), which gives the same text either way."""
        if not self._partial:
            try:
                return chunk.decode("utf-8")
            except UnicodeDecodeError:
                pass
        text = self._decoder.decode(chunk)
        self._partial = bool(self._decoder.getstate()[0])
        return text

    def close(self) -> list[SSEEvent]:
        """End of stream: a last line without its newline, or data without the blank line that
        should dispatch it, still counts (some servers end the stream that way)."""
        tail = self._decoder.decode(b"", final=True)
        self._buffer += tail
        events = self._drain()
        if self._buffer:
            self._line(self._buffer, events)
            self._buffer = ""
        if self._data:
            events.append(SSEEvent("\n".join(self._data), self._event or "message"))
            self._data = []
            self._event = ""
        return events

    def _drain(self) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        buf = self._buffer
        start = 0
        n = len(buf)
        while start < n:
            lf = buf.find("\n", start)
            cr = buf.find("\r", start)
            if lf < 0 and cr < 0:
                break
            if cr < 0 or (0 <= lf < cr):
                end, nxt = lf, lf + 1
            elif cr == n - 1:
                # CR as the very last character: the LF of a CRLF may be in the next read.
                end, nxt = cr, cr + 1
                self._pending_cr = True
            else:
                end = cr
                nxt = cr + 2 if buf[cr + 1] == "\n" else cr + 1
            self._line(buf[start:end], events)
            start = nxt
        self._buffer = buf[start:]
        return events

    def _line(self, line: str, events: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                events.append(SSEEvent("\n".join(self._data), self._event or "message"))
            self._data = []
            self._event = ""
            return
        if line.startswith(":"):
            self.comments += 1
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        # id and retry mean nothing to a one-shot completion stream.


class StreamFormatError(ValueError):
    """A data line that is not JSON, or not shaped like an OpenAI stream chunk."""


class StreamServerError(RuntimeError):
    """The server put an error object in the stream."""


@dataclass
class ChunkInfo:
    """What one chunk told: tokens it carried (0 = not content), finish reason, usage."""

    tokens: int = 0
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    server_timing: dict[str, float] | None = None


@dataclass
class ChunkReader:
    """Reads the JSON chunks of one request's stream, in order (it keeps running usage)."""

    endpoint: str = "completions"
    _mode: str | None = None  # "ids", "usage" or "count", fixed by the first choice chunk
    _completion_so_far: int = 0
    seen_choice: bool = False
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    token_source: set[str] = field(default_factory=set)
    # Multi-turn: the answer's text, kept for the next turn's history (only when asked: the
    # hot path of every other request stays as it was).
    keep_text: bool = False
    text: list[str] = field(default_factory=list)

    def read(self, data: str) -> ChunkInfo:
        tokens, reason, usage, timing = self.parse(data)
        return ChunkInfo(tokens=tokens, finish_reason=reason, usage=usage, server_timing=timing)

    def parse(self, data: str) -> tuple[int, str | None, dict[str, Any] | None, Any]:
        """:meth:`read` as a tuple (tokens, finish reason, usage, server timing): the recorder
        calls this once per chunk, and a tuple costs less than a :class:`ChunkInfo`."""
        try:
            obj = _decode(data)
        except json.JSONDecodeError as exc:
            raise StreamFormatError(f"data line is not JSON ({exc.msg}): {data[:200]!r}") from exc
        if type(obj) is not dict:
            raise StreamFormatError(f"data line is not a JSON object: {data[:200]!r}")
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            message = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            raise StreamServerError(message)
        usage = obj.get("usage")
        if type(usage) is dict:
            _check_usage(usage)
            self.usage = usage
        else:
            usage = None
        timings = obj.get("timings")  # llama.cpp's per-request timings, ms
        timing = (
            {k: float(v) for k, v in timings.items() if isinstance(v, int | float)}
            if isinstance(timings, dict)
            else None
        )
        choices = obj.get("choices")
        if not choices:
            if choices is not None and not isinstance(choices, list):
                raise StreamFormatError(f"choices is not a list: {data[:200]!r}")
            return 0, None, usage, timing  # e.g. the usage-only last chunk (include_usage)
        if not isinstance(choices, list):
            raise StreamFormatError(f"choices is not a list: {data[:200]!r}")
        choice = choices[0]
        if type(choice) is not dict:
            raise StreamFormatError(f"choice is not an object: {data[:200]!r}")
        mode = self._mode
        if mode is None:
            if isinstance(choice.get("token_ids"), list):
                mode = "ids"
            elif usage is not None and "completion_tokens" in usage:
                mode = "usage"
            else:
                mode = "count"
            self._mode = mode
            self.token_source.add(mode)
        self.seen_choice = True
        if self.keep_text:
            self._keep(choice)
        if mode == "usage" and usage is not None:  # the common case, inline
            total = int(usage.get("completion_tokens") or 0)
            tokens = max(total - self._completion_so_far, 0)
            if total > self._completion_so_far:
                self._completion_so_far = total
        else:
            tokens = self._tokens(choice, usage)
        reason = choice.get("finish_reason")
        if reason:
            reason = str(reason)
            self.finish_reason = reason
            return tokens, reason, usage, timing
        return tokens, None, usage, timing

    def _keep(self, choice: dict[str, Any]) -> None:
        if self.endpoint == "chat":
            delta = choice.get("delta")
            piece = delta.get("content") if isinstance(delta, dict) else None
        else:
            piece = choice.get("text")
        if isinstance(piece, str):
            self.text.append(piece)

    def _tokens(self, choice: dict[str, Any], usage: Any) -> int:
        if self._mode == "ids":
            ids = choice.get("token_ids")
            return len(ids) if isinstance(ids, list) else 0
        if self._mode == "usage" and isinstance(usage, dict):
            total = int(usage.get("completion_tokens") or 0)
            delta = total - self._completion_so_far
            self._completion_so_far = max(total, self._completion_so_far)
            return max(delta, 0)
        return 1 if _has_content(choice, self.endpoint) else 0


def _check_usage(usage: dict[str, Any]) -> None:
    """A usage object whose counts are not whole numbers (``NaN``, ``Infinity``, ``"many"``, -1,
    2.5) makes the chunk malformed: the error names each bad field with its value as sent."""
    for name in USAGE_COUNTS:
        value = usage.get(name)
        if not (value is None or (type(value) is int and value >= 0)):
            break
    else:
        return  # the common case: every count a plain int (checked once per chunk)
    bad = [
        f"usage.{name}={json.dumps(usage[name])}"
        for name in USAGE_COUNTS
        if usage.get(name) is not None and not _is_count(usage[name])
    ]
    if bad:
        raise StreamFormatError(f"not a token count: {', '.join(bad)}")


def _is_count(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return value >= 0 and (isinstance(value, int) or value.is_integer())


def _has_content(choice: dict[str, Any], endpoint: str) -> bool:
    """Whether a chunk without token counts carries a token. A finish chunk or a role-only chat
    chunk with empty text carries none; any other chunk with a text field does (its text may be
    empty for a special or partial-UTF-8 token)."""
    finished = bool(choice.get("finish_reason"))
    if endpoint == "chat":
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        values = [delta.get(k) for k in ("content", "reasoning_content", "reasoning")]
        if any(isinstance(v, str) and v for v in values) or delta.get("tool_calls"):
            return True
        has_text_field = any(isinstance(v, str) for v in values)
        return has_text_field and "role" not in delta and not finished
    text = choice.get("text")
    if isinstance(text, str):
        return bool(text) or not finished
    return False
