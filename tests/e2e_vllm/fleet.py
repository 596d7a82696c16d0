"""The real vLLM the suite talks to: started here from provision.py's cache, or an existing
server named by `E2E_VLLM_URL` (a GPU fleet: then nothing is installed or started but the
proxy). Also the reference side of every comparison: vLLM's own answer to a chat request,
its `/tokenize` and its `/metrics`.

Every server started here runs in its own process group and is stopped by its pid's group
(SIGTERM, then SIGKILL): at the fixture's end, at exit, and on SIGTERM (CI's `timeout`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from tests.e2e_vllm.provision import Provisioned
from tests.support.servers import ServerProcess, free_port

SERVED_NAME = "qwen2.5-coder-0.5b"
MAX_MODEL_LEN = 4096
# Below the proxy's own bound on `top_logprobs` (20), so a request for more reaches vLLM and
# its refusal shows how the proxy names the parameter.
MAX_LOGPROBS = 5
# Loading, then the CPU backend's warm-up: ~45 s on two idle cores; a bound, not a speed.
START_TIMEOUT = 600.0
STOP_TIMEOUT = 60.0
HTTP_TIMEOUT = 300.0

_STARTED: list[ServerProcess] = []


def stop_all() -> None:
    """Every server this process started and did not stop yet, by its process group."""
    while _STARTED:
        stopped(_STARTED[-1])


atexit.register(stop_all)


def started(server: ServerProcess, timeout: float) -> ServerProcess:
    _STARTED.append(server)
    return server.start(timeout)


def stopped(server: ServerProcess, timeout: float = STOP_TIMEOUT) -> None:
    server.stop(timeout)
    if server in _STARTED:
        _STARTED.remove(server)
    # vLLM's engine and worker are children in the server's process group; should one outlive
    # the API server (which stop() waited for), it goes with the group (its id is our pid).
    if server.proc is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.proc.pid, signal.SIGKILL)


def _on_sigterm(signum: int, frame: object) -> None:
    # CI's `timeout` signals the whole process group; our servers are in groups of their own
    # (start_new_session), so they are stopped here and pytest's teardown runs as on Ctrl-C.
    # Once: a second TERM (timeout signals its child and then the group) must not cut that
    # teardown short; atexit's stop_all is the last resort.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def install_sigterm_handler() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)


def serve_command(p: Provisioned, parser: str, port: int) -> list[str]:
    cmd = [str(p.vllm), "serve", str(p.model), "--served-model-name", SERVED_NAME,
           "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", str(MAX_MODEL_LEN), "--max-logprobs", str(MAX_LOGPROBS),
           "--dtype", "bfloat16",
           # The CPU build has no CUDA graphs and Triton has no CPU backend: eager mode skips
           # the graph capture and torch.compile warm-up (minutes on two cores) it would try.
           "--enforce-eager",
           # The CPU backend reserves --gpu-memory-utilization (0.92) of the NUMA node's memory
           # and refuses to start when other processes hold more than the rest ("Available
           # memory on node 0 ... is less than desired CPU memory utilization"). A fixed KV
           # cache skips that check; 1 GiB holds far more than 4,096 tokens of this model.
           "--kv-cache-memory-bytes", str(1 << 30),
           "--enable-auto-tool-choice", "--tool-call-parser", parser]
    if parser == "llama3_json":
        # llama3_json looks up Llama 3's `<|python_tag|>` in the vocabulary and refuses to start
        # without it: the same tokenizer with that token added (convert.py).
        cmd += ["--tokenizer", str(p.llama3_tokenizer)]
    return cmd


def serve_env() -> dict[str, str]:
    return {
        # The model is a local folder; no hub is reachable here, and none is needed.
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        # vLLM reports usage to its authors' server by default; nothing leaves this machine.
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
    }


@dataclass
class Vllm:
    """A vLLM OpenAI server the suite compares the proxy with."""

    url: str
    model: str
    parser: str | None  # None: an existing server (E2E_VLLM_URL), parser unknown

    def chat(self, **body: Any) -> dict[str, Any]:
        """vLLM's own non-streamed answer to a chat request (temperature 0 unless given)."""
        body = {"model": self.model, "temperature": 0, **body}
        response = httpx.post(self.url + "/v1/chat/completions", json=body,
                              timeout=HTTP_TIMEOUT)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def chat_error(self, **body: Any) -> tuple[int, dict[str, Any]]:
        body = {"model": self.model, "temperature": 0, **body}
        response = httpx.post(self.url + "/v1/chat/completions", json=body,
                              timeout=HTTP_TIMEOUT)
        error: dict[str, Any] = response.json()
        return response.status_code, error

    def tokenize(self, messages: list[dict[str, Any]], **extra: Any) -> int:
        """How many prompt tokens vLLM's chat template makes of `messages`."""
        body = {"model": self.model, "messages": messages, "add_generation_prompt": True,
                **extra}
        response = httpx.post(self.url + "/tokenize", json=body, timeout=HTTP_TIMEOUT)
        response.raise_for_status()
        return int(response.json()["count"])

    def gauge(self, name: str) -> float:
        """A gauge of vLLM's /metrics (summed over its label sets, e.g. engines)."""
        text = httpx.get(self.url + "/metrics", timeout=30).text
        return metric_sum(text, name)


def metric_sum(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    total = 0.0
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? ([0-9.eE+-]+)$", re.MULTILINE)
    for match in pattern.finditer(text):
        label_text = match.group(1) or ""
        if all(f'{k}="{v}"' in label_text for k, v in (labels or {}).items()):
            total += float(match.group(2))
    return total


def external_url() -> str | None:
    return os.environ.get("E2E_VLLM_URL") or None


def existing(url: str) -> Vllm:
    url = url.rstrip("/").removesuffix("/v1")
    models = httpx.get(url + "/v1/models", timeout=30).json()["data"]
    model = os.environ.get("E2E_VLLM_MODEL") or models[0]["id"]
    return Vllm(url=url, model=model, parser=None)


@contextmanager
def serving(p: Provisioned, parser: str) -> Iterator[Vllm]:
    port = free_port()
    server = ServerProcess(serve_command(p, parser, port), port, env=serve_env(),
                           ready_path="/v1/models", log_name=f"vllm-{parser}")
    try:
        started(server, START_TIMEOUT)
        yield Vllm(url=server.url, model=SERVED_NAME, parser=parser)
    finally:
        stopped(server)


class Fleet:
    """At most one vLLM of ours at a time: asking for another parser stops the running one."""

    def __init__(self, provisioned: Provisioned | None) -> None:
        self._provisioned = provisioned
        self._parser: str | None = None
        self._current: Vllm | None = None
        self._stack = ExitStack()

    def get(self, parser: str) -> Vllm:
        external = external_url()
        if external is not None:  # an existing server: its parser is whatever it runs
            self._current = self._current or existing(external)
            return self._current
        if self._parser != parser or self._current is None:
            self.close()
            assert self._provisioned is not None
            self._current = self._stack.enter_context(serving(self._provisioned, parser))
            self._parser = parser
        return self._current

    def close(self) -> None:
        self._stack.close()
        self._stack = ExitStack()
        self._current = None
        self._parser = None
