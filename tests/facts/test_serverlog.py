"""Server-log parsing: real vLLM logs (the CPU build here, vLLM 0.22 on MI355X from the peers),
plus the memory-accounting and SGLang wordings that those logs do not contain."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sweeper.facts.serverlog import apply_server_log, parse_server_log
from sweeper.schema import Fact, RunManifest, Source
from sweeper.units import GIB
from tests._peers import PEERS, require_peers

DATA = Path(__file__).parent / "data"
CPU_LOG = DATA / "vllm-0.32-cpu-default.log"
PEER_LOGS = sorted(PEERS.glob("aiperf-0.8-*/conc*/server.log"))


def value_of(fact: Fact | None) -> object:
    """The fact's value; fails when the parser found no fact at all."""
    assert fact is not None
    return fact.value


def _manifest() -> RunManifest:
    return RunManifest(
        run_id="r1",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        sweeper_version="0",
        source=Source(tool="sweeper record"),
    )


def test_real_cpu_vllm_log() -> None:
    text = CPU_LOG.read_text()
    log = parse_server_log(text)
    assert log.engine == "vllm"
    assert log.version == "0.32.0"
    config = log.config
    # The values the same server reported on /metrics (vllm:cache_config_info) at the time.
    assert value_of(config.kv_cache_tokens) == 65_536
    assert value_of(config.kv_cache_memory_bytes) == 268_435_456
    assert value_of(config.kv_cache_max_concurrency) == 32.0
    assert value_of(config.max_model_len) == 2048
    assert value_of(config.dtype) == "float32"
    assert config.enable_chunked_prefill is not None and config.enable_chunked_prefill.value is True
    assert value_of(config.tensor_parallel_size) == 1
    # Every fact says it came from the log and carries its line.
    for name, fact in config:
        if isinstance(fact, Fact):
            assert fact.source == "log", name
            assert (fact.detail and fact.detail in text) or fact.detail.endswith("…"), name
    assert "CPU KV cache size: 65,536 tokens" in (config.kv_cache_tokens.detail or "")
    # Host, port and model path say nothing about the configuration: not copied.
    assert "host" not in config.extra and "port" not in config.extra
    assert log.stats, "the periodic Engine 000 lines"
    lines = text.split("\n")
    for stat in log.stats:
        assert "Engine 000" in lines[stat.line - 1]
        assert 0.0 <= stat.kv_usage <= 1.0
        assert stat.time is not None and re.fullmatch(r"\d\d-\d\d \d\d:\d\d:\d\d", stat.time)
    assert log.preemption_lines == 0


def test_peer_logs_are_there() -> None:
    """Every level of the AIPerf 0.8 peer sweep has its server log (8 levels), so the
    parametrized test below runs on each; without the data it fails where it is required."""
    if not PEER_LOGS:
        message = f"peers' data sets not found under {PEERS}"
        if require_peers():
            pytest.fail(f"{message} (SWEEPER_REQUIRE_PEERS is set)")
        pytest.skip(message)
    assert [p.parent.name for p in PEER_LOGS] == [
        f"conc{c}" for c in sorted([1, 16, 2, 32, 4, 40, 48, 8], key=str)
    ]


@pytest.mark.skipif(not PEER_LOGS, reason=f"peers' data sets not found under {PEERS}")
@pytest.mark.parametrize("path", PEER_LOGS, ids=lambda p: p.parent.name)
def test_peer_vllm_022_logs(path: Path) -> None:
    text = path.read_text(errors="replace")
    log = parse_server_log(text)
    assert log.engine == "vllm"
    assert log.version == "0.22.0"
    config = log.config
    command = (path.parent / "vllm_command.txt").read_text()
    seqs = int(re.search(r"--max-num-seqs[ =](\d+)", command).group(1))  # type: ignore[union-attr]
    assert value_of(config.max_num_seqs) == seqs
    assert value_of(config.gpu_memory_utilization) == 0.95
    assert value_of(config.kv_cache_dtype) == "fp8"
    assert value_of(config.block_size) == 32
    size = re.search(r"GPU KV cache size: ([\d,]+) tokens", text)
    assert size is not None
    assert value_of(config.kv_cache_tokens) == int(size.group(1).replace(",", ""))
    assert value_of(config.max_num_batched_tokens) == 8192
    assert value_of(config.weights_memory_bytes) == round(214.51 * GIB)
    stat_lines = [ln for ln in text.split("\n") if "Avg prompt throughput" in ln]
    assert len(log.stats) == len(stat_lines) > 0
    # Running never exceeds --max-num-seqs: the scheduler line was read field by field right.
    assert max(s.running for s in log.stats) <= seqs
    first = log.stats[0]
    m = re.search(
        r"Running: (\d+) reqs, Waiting: (\d+) reqs, GPU KV cache usage: ([\d.]+)%", stat_lines[0]
    )
    assert m is not None
    assert (first.running, first.waiting) == (int(m.group(1)), int(m.group(2)))
    assert first.kv_usage == pytest.approx(float(m.group(3)) / 100)
    # The api key never reaches the manifest, whatever the log shows.
    assert not any("key" in name for name in config.extra)


# The memory accounting of vLLM >= 0.11 (GPU builds), with the reference report's figures.
NEW_ACCOUNTING = (
    "(EngineCore_DP0 pid=1) INFO 09-12 10:00:00 [gpu_model_runner.py:2653] Model loading took "
    "14.2500 GiB and 3.1 seconds\n"
    "(EngineCore_DP0 pid=1) INFO 09-12 10:00:09 [gpu_worker.py:298] Available KV cache memory: "
    "4.64 GiB\n"
    "(EngineCore_DP0 pid=1) INFO 09-12 10:00:09 [kv_cache_utils.py:1087] GPU KV cache size: "
    "86,896 tokens\n"
    "(EngineCore_DP0 pid=1) INFO 09-12 10:00:09 [kv_cache_utils.py:1091] Maximum concurrency for "
    "2,048 tokens per request: 42.43x\n"
    "(EngineCore_DP0 pid=1) INFO 09-12 10:00:20 [gpu_worker.py:391] Free memory on device "
    "(23.20/23.52 GiB) on startup. Desired GPU memory utilization is (0.9, 21.17 GiB). Actual "
    "usage is 15.49 GiB for consumed memory (weights + non-torch), 1.04 GiB for peak activation, "
    "and 0.34 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with "
    "`--kv-cache-memory=6569114112` (6.12 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=8105812787` (7.55 GiB) to fully utilize gpu memory. Current kv cache "
    "memory in use is 4.64 GiB.\n"
    "(APIServer pid=0) INFO 09-12 10:00:25 [scheduler.py:210] Chunked prefill is enabled with "
    "max_num_batched_tokens=2048.\n"
)


def test_new_memory_accounting() -> None:
    config = parse_server_log(NEW_ACCOUNTING).config
    assert value_of(config.kv_cache_tokens) == 86_896
    assert value_of(config.kv_cache_memory_bytes) == round(4.64 * GIB)
    assert value_of(config.suggested_kv_cache_memory_bytes) == 6_569_114_112
    assert config.extra["kv_cache_memory_bytes_full_device"].value == 8_105_812_787
    assert value_of(config.total_memory_bytes) == round(23.52 * GIB)
    assert value_of(config.memory_budget_bytes) == round(21.17 * GIB)
    assert value_of(config.gpu_memory_utilization) == 0.9
    assert value_of(config.activation_peak_bytes) == round(1.04 * GIB)
    assert value_of(config.cuda_graph_memory_bytes) == round(0.34 * GIB)
    assert value_of(config.weights_memory_bytes) == round(14.25 * GIB)
    # consumed (weights + non-torch) minus weights
    assert value_of(config.non_torch_memory_bytes) == round(15.49 * GIB) - round(14.25 * GIB)
    assert value_of(config.max_num_batched_tokens) == 2048
    assert value_of(config.kv_cache_max_concurrency) == 42.43


# vLLM 0.6 - 0.10 (V0 engine): one profiling summary over three lines, blocks instead of tokens.
OLD_ACCOUNTING = """\
INFO 10-01 09:00:00 api_server.py:528] vLLM API server version 0.6.3.post1
INFO 10-01 09:00:05 worker.py:241] Memory profiling takes 0.69 seconds
INFO 10-01 09:00:05 worker.py:241] the current vLLM instance can use total_gpu_memory (79.25GiB) x gpu_memory_utilization (0.90) = 71.33GiB
INFO 10-01 09:00:05 worker.py:241] model weights take 14.99GiB; non_torch_memory takes 0.26GiB; PyTorch activation peak memory takes 1.39GiB; the rest of the memory reserved for KV Cache is 54.69GiB.
INFO 10-01 09:00:05 gpu_executor.py:76] # GPU blocks: 28001, # CPU blocks: 2048
INFO 10-01 09:00:05 gpu_executor.py:80] Maximum concurrency for 32768 tokens per request: 13.67x
INFO 10-01 09:01:00 metrics.py:349] Avg prompt throughput: 512.3 tokens/s, Avg generation throughput: 80.1 tokens/s, Running: 4 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 12.5%, CPU KV cache usage: 0.0%.
WARNING 10-01 09:01:02 scheduler.py:1481] Sequence group cmpl-7 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1
WARNING 10-01 09:01:03 scheduler.py:1481] Sequence group cmpl-9 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=2
"""


def test_old_memory_accounting_and_v0_stats() -> None:
    log = parse_server_log(OLD_ACCOUNTING)
    assert log.engine == "vllm" and log.version == "0.6.3.post1"
    config = log.config
    assert value_of(config.total_memory_bytes) == round(79.25 * GIB)
    assert value_of(config.memory_budget_bytes) == round(71.33 * GIB)
    assert value_of(config.weights_memory_bytes) == round(14.99 * GIB)
    assert value_of(config.non_torch_memory_bytes) == round(0.26 * GIB)
    assert value_of(config.activation_peak_bytes) == round(1.39 * GIB)
    assert value_of(config.kv_cache_memory_bytes) == round(54.69 * GIB)
    assert value_of(config.num_gpu_blocks) == 28_001
    assert value_of(config.kv_cache_max_concurrency) == 13.67
    assert len(log.stats) == 1
    stat = log.stats[0]
    assert (stat.running, stat.waiting, stat.kv_usage) == (4, 2, 0.125)
    assert stat.prompt_tok_s == 512.3 and stat.gen_tok_s == 80.1 and stat.prefix_hit is None
    assert log.preemption_lines == 2
    assert len(log.warnings) == 2  # different messages (request ids differ)


SGLANG_LOG = """\
[2025-07-18 15:30:00] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tokenizer_path='Qwen/Qwen2.5-7B-Instruct', api_key='sk-secret', dtype='auto', kv_cache_dtype='auto', mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', tp_size=2, dp_size=1, pp_size=1, page_size=1, context_length=None)
[2025-07-18 15:30:10 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=63.98 GB, mem usage=7.25 GB.
[2025-07-18 15:30:11 TP0] KV Cache is allocated. #tokens: 1033338, K size: 27.59 GB, V size: 27.59 GB
[2025-07-18 15:30:12 TP0] max_total_num_tokens=1033338, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4097, context_len=32768, available_gpu_mem=7.21 GB
[2025-07-18 15:32:52 TP0] Prefill batch. #new-seq: 1, #new-token: 2192, #cached-token: 35, token usage: 0.00, #running-req: 0, #queue-req: 0, timestamp: 2025-07-18T15:32:52.498932
[2025-07-18 15:32:54 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317, timestamp: 2025-07-18T15:32:54.159394
[2025-07-18 15:32:55 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.5000 -> 0.7000
"""


def test_sglang_log() -> None:
    log = parse_server_log(SGLANG_LOG)
    assert log.engine == "sglang"
    config = log.config
    assert value_of(config.kv_cache_tokens) == 1_033_338
    assert value_of(config.max_num_batched_tokens) == 8192
    assert config.enable_chunked_prefill is not None and config.enable_chunked_prefill.value
    assert value_of(config.max_num_seqs) == 4097
    assert value_of(config.max_model_len) == 32768
    assert value_of(config.tensor_parallel_size) == 2
    assert value_of(config.gpu_memory_utilization) == 0.88
    assert value_of(config.kv_cache_memory_bytes) == 2 * round(27.59 * GIB)
    assert value_of(config.weights_memory_bytes) == round(7.25 * GIB)
    assert value_of(config.dtype) == "bfloat16"
    assert "api_key" not in config.extra
    # The key's value never reaches a fact's detail either, though the line it sits on is kept.
    facts = [f for _, f in config if isinstance(f, Fact)] + list(config.extra.values())
    assert any("ServerArgs(" in (f.detail or "") for f in facts)
    assert all("sk-secret" not in (f.detail or "") for f in facts)
    assert [(s.running, s.waiting, s.kv_usage) for s in log.stats] == [
        (0, 0, 0.0),
        (233, 317, 0.82),
    ]
    assert log.stats[1].gen_tok_s == 4594.01 and log.stats[1].time == "2025-07-18 15:32:54"
    assert log.preemption_lines == 1


def test_apply_fills_only_gaps() -> None:
    manifest = _manifest()
    manifest.server.config.kv_cache_tokens = Fact(value=1234, source="metrics", detail="x")
    manifest.server.config.max_num_seqs = Fact(value=16, source="user")
    log = parse_server_log(CPU_LOG.read_text())
    apply_server_log(manifest, log)
    config = manifest.server.config
    assert value_of(config.kv_cache_tokens) == 1234
    assert config.kv_cache_tokens.source == "metrics"
    assert config.max_num_seqs is not None and config.max_num_seqs.source == "user"
    assert config.max_model_len is not None and config.max_model_len.source == "log"
    assert config.extra["enforce_eager"].value is True
    assert manifest.server.engine == "vllm"
    assert value_of(manifest.server.version) == "0.32.0"
    assert manifest.server.version.source == "log"
    # The manifest still validates and round-trips with the log's facts in it.
    assert RunManifest.model_validate_json(manifest.model_dump_json()) == manifest


def test_apply_keeps_known_engine_and_version() -> None:
    manifest = _manifest()
    manifest.server.engine = "vllm"
    manifest.server.version = Fact(value="0.32.0", source="endpoint", detail="/version")
    apply_server_log(manifest, parse_server_log(OLD_ACCOUNTING))
    assert manifest.server.version.source == "endpoint"


def test_secrets_are_masked() -> None:
    line = (
        "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'api_key': "
        "['sk-abc'], 'max_num_seqs': 4, 'hf_token': 'hf_xyz', 'max_num_batched_tokens': 512}"
    )
    config = parse_server_log(line).config
    assert value_of(config.max_num_seqs) == 4
    assert value_of(config.max_num_batched_tokens) == 512
    detail = config.max_num_seqs.detail or ""
    assert "sk-abc" not in detail and "hf_xyz" not in detail and "'max_num_seqs': 4" in detail
    assert "api_key" not in config.extra and "hf_token" not in config.extra


def test_terminal_escapes_are_stripped_from_every_line_kept() -> None:
    """A log captured from a terminal: a title-setting OSC (ESC]0;...BEL), colours, a charset
    switch, a bell. The facts are read, and no escape or control character is kept."""
    line = (
        "\x1b]0;vllm serve\x07(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default "
        "args: {'max_num_seqs': \x1b[1m4\x1b[0m, 'max_num_batched_tokens': 512}\x1b(B\x07"
    )
    config = parse_server_log(line).config
    assert value_of(config.max_num_seqs) == 4
    detail = config.max_num_seqs.detail or ""
    assert "'max_num_seqs': 4" in detail and "vllm serve" not in detail
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", detail)


def test_unknown_text_gives_an_empty_result() -> None:
    log = parse_server_log("hello\n\nnothing to see here\n")
    assert log.engine is None and log.version is None
    assert log.stats == [] and log.preemption_lines == 0
    assert all(value is None for name, value in log.config if name != "extra")


TRACES = Path(__file__).resolve().parents[2] / "traces"


def test_sample_runs_server_logs_carry_their_flags() -> None:
    """The sample trace sets' logs (real vLLM CPU runs) give back the flags each was started with."""
    preemption = parse_server_log((TRACES / "small-vllm-cpu-preemption" / "server.log").read_text())
    config = preemption.config
    assert value_of(config.max_num_seqs) == 4
    assert value_of(config.num_gpu_blocks) == 16
    assert value_of(config.max_model_len) == 1024
    assert value_of(config.kv_cache_tokens) == 16 * 128
    # Its periodic lines saw the pool fill and requests queue; never more than 4 running.
    assert max(stat.running for stat in preemption.stats) <= 4
    assert max(stat.waiting for stat in preemption.stats) > 0
    assert max(stat.kv_usage for stat in preemption.stats) > 0.5
    chunked = parse_server_log(
        (TRACES / "small-vllm-cpu-chunked-prefill" / "server.log").read_text()
    ).config
    assert value_of(chunked.max_num_batched_tokens) == 256
    assert chunked.enable_chunked_prefill is not None and chunked.enable_chunked_prefill.value
