"""A fleet's 400 on a chat request, said in the words of the Responses request that caused it.

vLLM (0.32 at least) names the chat-completions field it refused in `param` and ends the message
with `(parameter=X, value=Y)` (tests/fixtures/vllm/real-0.32/bad_*.json). A Responses client
never sent `max_tokens` or `input_tokens`: core/translate/chat.py made them from its request, so
the error names the field the client did send (`CHAT_TO_RESPONSES`, built from chat.py's
mapping). A name the table does not know is one the client cannot have sent (vLLM-only fields
the proxy never sets): `param` is then null rather than a name that would mislead.

The message keeps vLLM's sentence with `X=` rewritten to the client's name where it leads a
value (`max_tokens=100000 cannot be...` -> `max_output_tokens=100000 cannot be...`), and loses
the trailing `(parameter=X, value=Y)`: `param` says the same in the client's words, and a value
repeated after the sentence adds nothing.

The code says the cause, as OpenAI's do: a prompt longer than the context is
`context_length_exceeded` (Codex keys its context handling on it); a number above the fleet's
bound (`max_output_tokens` past `max_model_len`, `top_logprobs` past 20) is
`integer_above_max_value`, never `context_length_exceeded` (a 2-token prompt overflows nothing).

Only /v1/responses (and its compaction and jobs) maps: on /v1/chat/completions the names are
the client's own and pass through. Pure.

vLLM 0.32 checks some fields only once a streamed answer has begun (`top_logprobs` past
`--max-logprobs`): it answers 200 and the stream's only frame is the 400's body
(`make e2e-vllm` showed it). `stream_refusal` reads such a frame as the same refusal.
"""

from __future__ import annotations

import re
from types import TracebackType

from proxy.core.errors import InvalidRequest, ProxyError
from proxy.core.translate.truncation import CONTEXT_LENGTH_EXCEEDED

INTEGER_ABOVE_MAX = "integer_above_max_value"

# vLLM's name -> the Responses field it came from (core/translate/chat.py's mapping).
CHAT_TO_RESPONSES = {
    "max_tokens": "max_output_tokens",
    "max_completion_tokens": "max_output_tokens",
    "input_tokens": "input",  # vLLM 0.32's prompt-length check
    "prompt": "input",
    "messages": "input",
    "input": "input",  # the proxy's own default for an overflow without a param (client.py)
    "logprobs": "top_logprobs",  # vLLM checks top_logprobs against --max-logprobs as `logprobs`
    "top_logprobs": "top_logprobs",
    "response_format": "text.format",
    "structured_outputs": "text.format",
    "reasoning_effort": "reasoning.effort",
    "tools": "tools",
    "tool_choice": "tool_choice",
    "parallel_tool_calls": "parallel_tool_calls",
    "model": "model",
    "temperature": "temperature",
    "top_p": "top_p",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "user": "user",
}
_INPUT = "input"
# vLLM's `(parameter=X, value=Y)` or `(parameter=X)` at the end of a message.
_TRAILER = re.compile(r"\s*\(parameter=[A-Za-z0-9_.]+(?:, value=[^)]*)?\)\s*$")
# How vLLM words a value above its bound: "max_tokens=N cannot be greater than max_model_len",
# "Requested sample logprobs of 50, which is greater than max allowed: 20".
_ABOVE = ("greater than", "exceeds the maximum", "too large")


def for_responses(error: ProxyError) -> ProxyError:
    """`error` as a Responses client should read it; anything but a fleet 400 as it is."""
    if type(error) is not InvalidRequest:
        return error  # our own errors (auto tool choice, ...) already speak Responses
    sent = error.param
    param = CHAT_TO_RESPONSES.get(sent) if sent is not None else None
    message = _TRAILER.sub("", error.message)
    if sent is not None and param is not None and param != sent:
        message = re.sub(rf"\b{re.escape(sent)}=", f"{param}=", message)
    code = error.code
    if param == _INPUT and (code == CONTEXT_LENGTH_EXCEEDED or sent == "input_tokens"):
        code = CONTEXT_LENGTH_EXCEEDED
    elif param is not None and param != _INPUT and any(w in message for w in _ABOVE):
        code = INTEGER_ABOVE_MAX
    elif code == CONTEXT_LENGTH_EXCEEDED:
        code = None  # the message named the context but the field was not the prompt
    mapped = InvalidRequest(message, param=param, code=code, status=error.status)
    mapped.headers = error.headers
    return mapped


def stream_refusal(error: object) -> InvalidRequest | None:
    """An error frame that is a 400 refusal (vLLM's body: `code` 400), mapped as
    `for_responses` maps an HTTP 400; None for any other error frame (a failure mid-answer)."""
    if not isinstance(error, dict) or error.get("code") != 400:
        return None
    message, param = error.get("message"), error.get("param")
    refusal = InvalidRequest(str(message or "the fleet refused the request"),
                             param=param if isinstance(param, str) and param else None)
    mapped = for_responses(refusal)
    assert isinstance(mapped, InvalidRequest)
    return mapped


def failure_code(error: ProxyError) -> str | None:
    """The `response.failed` code of a job whose fleet refused it: the context's (the SDK's
    codes do not list it but clients key on it); for any other 400 `server_error`, said
    explicitly so that a message naming `max_model_len` is not taken for an overflow; None for
    other failures (the assembler reads the message, as before)."""
    if error.code == CONTEXT_LENGTH_EXCEEDED:
        return CONTEXT_LENGTH_EXCEEDED
    return "server_error" if isinstance(error, InvalidRequest) else None


def in_responses_words() -> _InResponsesWords:
    """Around a fleet call made for a Responses request: its 400 re-raised mapped."""
    return _IN_RESPONSES_WORDS


class _InResponsesWords:
    """`in_responses_words`' context, stateless (one serves every call). A class rather than a
    `contextmanager`, whose generator cost 1.0 µs per create against 0.2."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if isinstance(exc, InvalidRequest):
            mapped = for_responses(exc)
            if mapped is not exc:
                raise mapped from exc


_IN_RESPONSES_WORDS = _InResponsesWords()
