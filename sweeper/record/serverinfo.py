"""What the server says about itself, before a sweep starts.

``/v1/models`` (the model ids, vLLM's ``max_model_len``), ``/version`` (vLLM), ``/tokenize``
(vLLM: exact prompt lengths), and a first scrape of ``/metrics`` (the engine's metric family,
``vllm:cache_config_info``). Every fact found goes into the manifest with its source. A server
that does not answer at all is one clear :class:`ServerUnreachable`, not a traceback.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from sweeper.errors import ConfigError, ServerError, ServerUnreachable
from sweeper.record.http import describe_exception
from sweeper.record.workload import TokenCounter
from sweeper.schema import Fact, strip_credentials

PROBE_TIMEOUT_S = 10.0
TOKENIZE_PROBE_TEXT = "hello world"


def api_roots(base_url: str) -> tuple[str, str]:
    """``http://h:8000`` or ``http://h:8000/v1`` -> (server root, OpenAI API root)."""
    base = base_url.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ConfigError(
            f"--base-url {strip_credentials(base_url)!r} must start with http:// or https:// "
            "(e.g. --base-url http://127.0.0.1:8000)"
        )
    root = base[: -len("/v1")] if base.endswith("/v1") else base
    return root, root + "/v1"


@dataclass
class ServerInfo:
    root: str
    api: str
    model_ids: list[str] = field(default_factory=list)
    owned_by: str | None = None
    max_model_len: int | None = None
    version: str | None = None
    engine: str | None = None
    tokenize: bool = False
    warnings: list[str] = field(default_factory=list)


async def probe_server(client: httpx.AsyncClient, base_url: str) -> ServerInfo:
    """Ask the server what it is. Raises ServerUnreachable when nothing answers."""
    root, api = api_roots(base_url)
    info = ServerInfo(root=root, api=api)
    shown = strip_credentials(root)
    try:
        response = await client.get(f"{api}/models", timeout=PROBE_TIMEOUT_S)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ServerUnreachable(
            f"cannot reach the server at {shown} ({describe_exception(exc)}); is it running, "
            "and is --base-url right?"
        ) from exc
    except httpx.HTTPError as exc:
        raise ServerUnreachable(
            f"the server at {shown} did not answer ({describe_exception(exc)})"
        ) from exc
    if response.status_code in (httpx.codes.UNAUTHORIZED, httpx.codes.FORBIDDEN):
        raise ServerError(
            f"the server at {shown} refused access (HTTP {response.status_code}); pass the key "
            "with --api-key or the OPENAI_API_KEY environment variable"
        )
    if response.status_code == httpx.codes.OK:
        data = _json(response)
        entries = data.get("data") if isinstance(data, dict) else None
        for entry in entries or []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                info.model_ids.append(entry["id"])
                if info.owned_by is None and isinstance(entry.get("owned_by"), str):
                    info.owned_by = entry["owned_by"]
                if info.max_model_len is None and isinstance(entry.get("max_model_len"), int):
                    info.max_model_len = entry["max_model_len"]
    else:
        info.warnings.append(f"{api}/models answered HTTP {response.status_code}; pass --model")
    info.version = await _version(client, root)
    if info.owned_by in ("vllm", "sglang", "llamacpp"):
        info.engine = {"llamacpp": "llama.cpp"}.get(info.owned_by, info.owned_by)
    return info


async def _version(client: httpx.AsyncClient, root: str) -> str | None:
    try:
        response = await client.get(f"{root}/version", timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if response.status_code != httpx.codes.OK:
        return None
    data = _json(response)
    if isinstance(data, dict) and isinstance(data.get("version"), str):
        return str(data["version"])
    return None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def server_facts(info: ServerInfo) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    if info.max_model_len is not None:
        facts["max_model_len"] = Fact(
            value=info.max_model_len, source="endpoint", detail="/v1/models"
        )
    return facts


def version_fact(info: ServerInfo) -> Fact | None:
    if info.version is None:
        return None
    return Fact(value=info.version, source="endpoint", detail="/version")


def _tokenize_body(model: str, text: str, endpoint: str) -> dict[str, Any]:
    if endpoint == "chat":
        return {
            "model": model,
            "messages": [{"role": "user", "content": text}],
            "add_generation_prompt": True,
        }
    return {"model": model, "prompt": text}


async def tokenize_counter(
    client: httpx.AsyncClient, info: ServerInfo, model: str, endpoint: str
) -> TokenCounter | None:
    """A counter backed by the server's ``/tokenize`` (vLLM), or None where it has none."""
    url = f"{info.root}/tokenize"

    async def count(text: str) -> int:
        response = await client.post(
            url, json=_tokenize_body(model, text, endpoint), timeout=PROBE_TIMEOUT_S
        )
        response.raise_for_status()
        data = response.json()
        if isinstance(data.get("count"), int):
            return int(data["count"])
        return len(data["tokens"])

    try:
        await count(TOKENIZE_PROBE_TEXT)
    except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
        return None
    info.tokenize = True
    return count


def tokenizer_counter(name: str, endpoint: str) -> TokenCounter:
    """A counter from a Hugging Face tokenizer the user named (``--tokenizer``). Imports
    transformers only then: sweeper does not need it otherwise."""
    try:
        from transformers import AutoTokenizer  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ConfigError(
            f"--tokenizer {name!r} needs the transformers package (pip install transformers), "
            "or leave --tokenizer out when the server has /tokenize"
        ) from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load tokenizer {name!r}: {exc}") from exc

    def count_sync(text: str) -> int:
        if endpoint == "chat":
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict):
                ids = ids["input_ids"]
            return len(ids)
        return len(tokenizer(text)["input_ids"])

    async def count(text: str) -> int:
        return await asyncio.to_thread(count_sync, text)

    return count
