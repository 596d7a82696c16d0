"""The simulator's pure core: directives, token accounting, validation, schema instances, tool
choice, plans, vLLM's shapes (against hand-written expectations and the golden .sse streams) and
embeddings. No server, no sockets."""

from __future__ import annotations

import base64
import json
import re
import struct
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import pydantic
import pytest

from proxy.simulator import embeddings, tokens, wire
from proxy.simulator.answer import directives, schema, script, tools
from proxy.simulator.config import SimConfig
from proxy.simulator.errors import SimError
from proxy.simulator.request import ChatRequest, parse_chat
from tests.support.sse import data_payloads

GOLDEN = Path(__file__).parents[1] / "unit" / "golden"
SHAPES = json.loads((GOLDEN / "vllm_shapes.json").read_text())
# The generic model's shapes before vLLM 0.32 (what vllm_shapes.json and the golden streams
# record); 0.32's are tests/simulator/test_simulator_real_032.py's.
CONFIG = SimConfig(legacy_shapes=True)
WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}


def body(text: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-model", "messages": [{"role": "user", "content": text}], **extra}


def request(text: str = "hello", config: SimConfig = CONFIG, **extra: Any) -> ChatRequest:
    return parse_chat(body(text, **extra), config)


def make_plan(text: str = "hello", config: SimConfig = CONFIG, **extra: Any) -> script.Plan:
    return script.plan(request(text, config, **extra), config,
                       request_id="chatcmpl-" + "ab" * 16, created=1_700_000_000)


def rejected(payload: Any, config: SimConfig = CONFIG) -> SimError:
    with pytest.raises(SimError) as info:
        parse_chat(payload, config)
    return info.value


def stream(plan: script.Plan, *, usage: bool = True, continuous: bool = False) -> list[Any]:
    return [p for _, p in wire.stream_frames(plan, include_usage=usage, continuous=continuous)]


# -- a tiny JSON-schema checker (what the generator promises, checked independently) ---------
def conforms(value: Any, node: Any, root: dict[str, Any]) -> bool:
    if not isinstance(node, dict):
        return node is not False
    if "$ref" in node:
        target: Any = root
        for key in node["$ref"].lstrip("#/").split("/"):
            target = target[key]
        return conforms(value, target, root)
    if "const" in node:
        return bool(value == node["const"])
    if "enum" in node:
        return value in node["enum"]
    if "anyOf" in node or "oneOf" in node:
        return any(conforms(value, b, root) for b in node.get("anyOf", node.get("oneOf")))
    if "allOf" in node:
        return all(conforms(value, b, root) for b in node["allOf"])
    return conforms_type(value, node, root)


def conforms_type(value: Any, node: dict[str, Any], root: dict[str, Any]) -> bool:
    kind = node.get("type")
    checks = {"string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
              "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
              "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
              "null": lambda v: v is None, "object": lambda v: isinstance(v, dict),
              "array": lambda v: isinstance(v, list)}
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if kinds and not any(checks[k](value) for k in kinds):
        return False
    if isinstance(value, dict):
        props = node.get("properties", {})
        if any(key not in value for key in node.get("required", [])):
            return False
        if node.get("additionalProperties") is False and set(value) - set(props):
            return False
        return all(conforms(value[k], props[k], root) for k in value if k in props)
    if isinstance(value, list):
        if len(value) < node.get("minItems", 0) or len(value) > node.get("maxItems", 10**9):
            return False
        return all(conforms(v, node.get("items", {}), root) for v in value)
    if isinstance(value, str):
        return node.get("minLength", 0) <= len(value) <= node.get("maxLength", 10**9)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return node.get("minimum", -1e308) <= value <= node.get("maximum", 1e308)
    return True


# -- shapes: key order, value types, patterns ---------------------------------------------------
def shape_errors(actual: Any, expected: Any, path: str = "$") -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        if list(actual) != list(expected):
            return [f"{path}: keys {list(actual)} != {list(expected)}"]
        return [e for k in expected for e in shape_errors(actual[k], expected[k], f"{path}.{k}")]
    if isinstance(expected, list):
        if not isinstance(actual, list) or (not expected) != (not actual):
            return [f"{path}: expected a list like {expected!r}, got {actual!r}"]
        return [e for i, item in enumerate(actual)
                for e in shape_errors(item, expected[0], f"{path}[{i}]")]
    kinds = {"<str>": str, "<int>": int, "<float>": float}
    if isinstance(expected, str) and expected in kinds:
        ok = isinstance(actual, kinds[expected]) and not isinstance(actual, bool)
        return [] if ok else [f"{path}: {actual!r} is not {expected}"]
    if isinstance(expected, str) and expected.startswith("re:"):
        ok = isinstance(actual, str) and re.fullmatch(expected[3:], actual) is not None
        return [] if ok else [f"{path}: {actual!r} does not match {expected[3:]}"]
    same = actual == expected and type(actual) is type(expected)
    return [] if same else [f"{path}: {actual!r} != {expected!r}"]


def golden_shape(value: Any) -> Any:
    """A recorded vLLM payload turned into an expectation: same keys, same types, ids by
    pattern, literal nulls/booleans/object names."""
    if isinstance(value, dict):
        return {k: (_id_pattern(v) if k == "id" else golden_shape(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [golden_shape(value[0])] if value else []
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return "<int>"
    if isinstance(value, float):
        return "<float>"
    return value if value in ("chat.completion.chunk", "function", "") else "<str>"


def _id_pattern(value: str) -> str:
    return "re:chatcmpl-tool-[0-9a-f]{32}" if value.startswith("chatcmpl-tool-") \
        else "re:chatcmpl-[0-9a-f]{32}"


# == directives =================================================================================
def test_directives_parse_merge_and_strip() -> None:
    text = "hi [[sim tokens=12 delay_ms=20]] there [[sim fail=error:3 reasoning_field=both]]"
    found = directives.parse(text)
    assert (found.tokens, found.delay_ms, found.reasoning_field) == (12, 20.0, "both")
    assert found.fail == directives.Failure("error", 3)
    assert directives.strip(text) == "hi there"
    assert directives.parse("no directive here") == directives.Directives()
    assert directives.parse("[[sim fail=http:503]] [[sim tools=2 finish=content_filter]]") == \
        directives.Directives(tools=2, finish="content_filter",
                              fail=directives.Failure("http", 503))


@pytest.mark.parametrize("text", ["[[sim tokns=3]]", "[[sim tokens=x]]", "[[sim tokens=-1]]",
                                  "[[sim fail=boom:1]]", "[[sim fail=http:200]]",
                                  "[[sim delay_ms=999999]]", "[[sim reasoning_field=r]]",
                                  "[[sim tokens]]"])
def test_bad_directives_are_rejected(text: str) -> None:
    with pytest.raises(directives.DirectiveError):
        directives.parse(text)
    assert rejected(body(text)).status == 400


# == tokens and prompt accounting ================================================================
@pytest.mark.parametrize("text", ["You said: hello", "{\"city\": \"Paris\"}", "a", "x  y\tz"])
def test_tokens_join_back_to_the_text(text: str) -> None:
    assert "".join(tokens.split(text)) == text
    assert tokens.split("You said: hi") == ["You", " said:", " hi"]


def test_prompt_tokens_follow_the_documented_formula() -> None:
    messages = [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "look at"},
                                             {"type": "image_url", "image_url": {"url": "x"}}]}]
    # 3 for the reply + (4 + 2) + (4 + 3: "look", "at", "[image]")
    assert tokens.prompt_tokens(messages, None) == 3 + 6 + 7
    assert tokens.prompt_tokens(messages, [WEATHER]) == 16 + len(orjson.dumps([WEATHER])) // 4


# == request validation ===========================================================================
def test_stream_options_without_stream_is_vllms_400() -> None:
    error = rejected(body(stream_options={"include_usage": True}))
    assert not shape_errors(error.body(), SHAPES["error_stream_options"])


def test_unknown_model_is_vllms_404() -> None:
    error = rejected({**body(), "model": "nope"})
    assert error.status == 404
    assert error.body()["error"]["message"] == "The model `nope` does not exist."
    assert not shape_errors(error.body(), SHAPES["error_model_not_found"])


def test_context_length_is_a_400_with_vllms_numbers() -> None:
    small = SimConfig(max_model_len=100, legacy_shapes=True)
    prompt = request(config=small).prompt_tokens
    error = rejected(body(max_tokens=95), small)
    assert error.status == 400 and not shape_errors(error.body(), SHAPES["error_context_length"])
    assert (f"maximum context length is 100 tokens. However, you requested {prompt + 95} tokens "
            f"({prompt} in the messages, 95 in the completion)") in error.message
    assert request(config=small, max_tokens=100 - prompt).max_tokens == 100 - prompt


@pytest.mark.parametrize("payload", [
    [1, 2], {"model": "sim-model"}, {"model": "sim-model", "messages": "hi"},
    body(stream="yes"), body(max_tokens="3"), body(max_tokens=0), body(n=2),
    {"model": "sim-model", "messages": [{"content": "no role"}]},
    body(tool_choice="required"), body(tools=[WEATHER], tool_choice={"function": {"name": "x"}}),
    body(response_format={"type": "yaml"}), body(reasoning_effort="extreme"),
    {"model": 7, "messages": [{"role": "user", "content": "x"}]},
])
def test_invalid_requests_are_400(payload: Any) -> None:
    error = rejected(payload)
    assert error.status == 400 and error.type in ("Bad Request", "BadRequestError")
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


def test_vllm_defaults() -> None:
    plain = request(stream=True)
    assert (plain.include_usage, plain.tool_mode, plain.model) == (False, "none", "sim-model")
    assert request(stream=True, stream_options={}).include_usage is True
    assert request(stream=True, stream_options={"include_usage": False}).include_usage is False
    assert request(tools=[WEATHER]).tool_mode == "auto"
    assert parse_chat({"messages": [{"role": "user", "content": "x"}]}, CONFIG).model == \
        "sim-model"


# == schema instances ==============================================================================
class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(min_length=5, max_length=5)


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=18, le=99)
    score: float
    active: bool
    color: Color
    nickname: str | None = None
    home: Address
    previous: list[Address] = pydantic.Field(min_length=2)
    tags: list[str]
    meta: dict[str, int]


def test_pydantic_schema_instance_validates() -> None:
    spec = Person.model_json_schema()
    assert "$defs" in spec  # the $ref path is exercised
    value = schema.instance(spec)
    assert conforms(value, spec, spec)
    Person.model_validate(value)  # pydantic agrees
    assert value["age"] == 18 and value["color"] == "red" and len(value["previous"]) == 2


@pytest.mark.parametrize("spec", [
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5}},
     "required": ["a", "b"]},
    {"type": "array", "items": {"type": "number", "maximum": 0.5}, "minItems": 3},
    {"type": ["null", "string"], "format": "email"},
    {"allOf": [{"properties": {"x": {"const": 3}}, "required": ["x"]},
               {"properties": {"y": {"enum": ["b", "c"]}}, "required": ["y"]}]},
    {"oneOf": [{"type": "null"}, {"type": "boolean"}]},
    {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
     "$ref": "#/$defs/N"},
    {"type": "string", "minLength": 10, "maxLength": 12},
])
def test_schema_instances_conform(spec: dict[str, Any]) -> None:
    value = schema.instance(spec)
    assert conforms(value, spec, spec), value
    assert schema.instance(spec) == value  # deterministic


def test_schema_strings_take_hints_from_the_user_text() -> None:
    spec = WEATHER["function"]["parameters"]
    assert schema.instance(spec) == {"city": "sim"}
    assert schema.instance(spec, {"city": "Paris"}) == {"city": "Paris"}


def test_numbers_are_whole_and_written_as_integers() -> None:
    """Codex declares counters (`yield_time_ms`, `max_output_tokens`) as `number` and parses
    them as integers: `1.5` or `1.0` would be refused."""
    spec = {"type": "object", "properties": {"n": {"type": "number"},
                                             "low": {"type": "number", "minimum": 7},
                                             "tight": {"type": "number", "maximum": 0.5}}}
    value = schema.instance(spec)
    assert json.dumps(value) == '{"n": 1, "low": 7, "tight": 0.5}'


def test_args_required_directive_keeps_only_required_properties() -> None:
    exec_command = {"type": "function", "function": {"name": "exec_command", "parameters": {
        "type": "object", "required": ["cmd"], "additionalProperties": False,
        "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"},
                       "shell": {"type": "string"}, "yield_time_ms": {"type": "number"}}}}}
    text = "please call exec_command cmd=pwd"
    assert calls(text, tools=[exec_command]) == [
        ("exec_command", '{"cmd": "pwd", "workdir": "sim", "shell": "sim", "yield_time_ms": 1}')]
    assert calls(text + " [[sim args=required]]", tools=[exec_command]) == [
        ("exec_command", '{"cmd": "pwd"}')]
    assert directives.parse("[[sim args=all]]").args == "all"
    with pytest.raises(directives.DirectiveError):
        directives.parse("[[sim args=some]]")


# == tool choice ===================================================================================
def calls(text: str, **extra: Any) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in tools.choose_calls(request(text, **extra))]


def test_auto_calls_only_the_tools_mentioned() -> None:
    both = [WEATHER, TIME]
    assert calls("what is up", tools=both) == []
    assert calls("please call get_weather city=Oslo", tools=both) == \
        [("get_weather", '{"city": "Oslo"}')]
    assert [n for n, _ in calls("get_time and get_weather", tools=both)] == \
        ["get_weather", "get_time"]
    assert calls("get_weathers is not a mention", tools=both) == []
    assert calls("call get_weather [[sim tools=0]]", tools=both) == []


def test_required_and_named_tool_choice() -> None:
    both = [WEATHER, TIME]
    assert [n for n, _ in calls("anything", tools=both, tool_choice="required")] == \
        ["get_weather"]
    named = {"type": "function", "function": {"name": "get_time"}}
    assert calls("anything", tools=both, tool_choice=named) == [("get_time", '{"tz": "sim"}')]
    assert calls("get_weather", tools=both, tool_choice="none") == []


def test_tools_directive_cycles_and_parallel_false_keeps_one() -> None:
    both = [WEATHER, TIME]
    names = [n for n, _ in calls("[[sim tools=3]]", tools=both)]
    assert names == ["get_weather", "get_time", "get_weather"]
    assert [n for n, _ in calls("get_time [[sim tools=2]]", tools=both)] == \
        ["get_time", "get_weather"]
    assert len(calls("[[sim tools=3]]", tools=both, parallel_tool_calls=False)) == 1


def test_call_directive_calls_the_named_tool_with_the_given_arguments() -> None:
    both = [WEATHER, TIME]
    assert calls('[[sim call=get_time call_args={"tz":"UTC"}]]', tools=both) == \
        [("get_time", '{"tz": "UTC"}')]
    # without call_args: the required properties only; not offered: no call
    assert calls("[[sim call=get_weather]]", tools=both) == [("get_weather", '{"city": "sim"}')]
    assert calls("[[sim call=nope]]", tools=both) == []
    assert calls("[[sim call=get_time]]", tools=both, tool_choice="none") == []
    after_result = [
        {"role": "user", "content": "[[sim call=get_time]]"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "noon"},
    ]
    req = parse_chat({"model": "sim-model", "messages": after_result, "tools": both}, CONFIG)
    assert tools.choose_calls(req) == []


@pytest.mark.parametrize("text", ["[[sim call_args=[1]]]", "[[sim call_args={x}]]",
                                  "[[sim call=a/b]]"])
def test_bad_call_directives_are_rejected(text: str) -> None:
    with pytest.raises(directives.DirectiveError):
        directives.parse(text)


def test_a_tool_result_turn_is_answered_in_text() -> None:
    messages = [
        {"role": "user", "content": "call get_weather"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny,  20C"},
        {"role": "tool", "tool_call_id": "call_9", "content": "late"},
    ]
    req = parse_chat({"model": "sim-model", "messages": messages, "tools": [WEATHER],
                      "tool_choice": "required"}, CONFIG)
    assert tools.choose_calls(req) == []
    assert script.answer_text(req) == "Tool results: get_weather=Sunny, 20C; call_9=late"


# == plans: token accounting, truncation, failures ================================================
def test_echo_answer_and_exact_token_count() -> None:
    plan = make_plan("  hello   there [[sim tokens=12]] ")
    assert plan.joined("content").startswith("You said: hello there ")
    assert plan.completion_tokens == 12 and plan.finish_reason == "stop"
    assert make_plan("one two three [[sim tokens=2]]").joined("content") == "You said:"
    assert make_plan("x").joined("content") == "You said: x"


def test_max_tokens_truncates_with_length_and_counts_reasoning() -> None:
    plan = make_plan("a b c d e f", max_tokens=3)
    assert (plan.completion_tokens, plan.finish_reason) == (3, "length")
    reasoner = make_plan("a b c", max_completion_tokens=5, model="sim-reasoner")
    assert [p.kind for p in reasoner.pieces] == ["reasoning"] * 5
    assert reasoner.finish_reason == "length" and reasoner.reasoning_tokens == 5
    tight = SimConfig(max_model_len=request("a b c d").prompt_tokens + 2, legacy_shapes=True)
    assert make_plan("a b c d", tight).completion_tokens == 2


def test_reasoning_length_follows_directive_and_effort() -> None:
    assert make_plan("hi").reasoning_tokens == 0
    assert make_plan("hi", model="sim-reasoner").reasoning_tokens == script.REASONER_TOKENS
    assert make_plan("hi", model="sim-reasoner", reasoning_effort="high").reasoning_tokens == \
        2 * script.REASONER_TOKENS
    assert make_plan("hi [[sim reasoning=3]]").reasoning_tokens == 3
    assert make_plan("hi [[sim reasoning=0]]", model="sim-reasoner").reasoning_tokens == 0


@pytest.mark.parametrize(("kind", "finish", "ending"), [
    ("error", None, "error"), ("stall", None, "stall"), ("cut", None, "cut"),
    ("abort", "abort", "done")])
def test_failures_come_after_k_tokens(kind: str, finish: str | None, ending: str) -> None:
    plan = make_plan(f"one two three four [[sim fail={kind}:2]]")
    assert (plan.completion_tokens, plan.finish_reason, plan.ending) == (2, finish, ending)
    short = make_plan(f"x [[sim fail={kind}:100]]")  # "You said: x"
    assert short.completion_tokens == 3 and short.ending == ending  # after the last token


def test_finish_directive_and_tool_finish_reasons() -> None:
    assert make_plan("x [[sim finish=content_filter]]").finish_reason == "content_filter"
    assert make_plan("get_weather", tools=[WEATHER]).finish_reason == "tool_calls"
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert make_plan("x", tools=[WEATHER], tool_choice=named).finish_reason == "stop"


def test_structured_output_is_json_of_the_schema() -> None:
    spec = Person.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": spec, "strict": True}}
    plan = make_plan("name=Ada", response_format=fmt)
    value = json.loads(plan.joined("content"))
    assert conforms(value, spec, spec) and value["name"] == "Ada"
    assert plan.completion_tokens > 10  # streamed in fragments
    obj = json.loads(make_plan("hi", response_format={"type": "json_object"}).joined("content"))
    assert obj == {"answer": "You said: hi"}


def test_plan_is_deterministic_for_a_request_id() -> None:
    assert make_plan("get_weather", tools=[WEATHER]) == make_plan("get_weather", tools=[WEATHER])


# == wire: the stream's structure ==================================================================
def test_text_stream_structure() -> None:
    frames = stream(make_plan("hi [[sim tokens=3]]"))
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [f["choices"][0]["delta"]["content"] for f in frames[1:4]] == ["You", " said:", " hi"]
    assert frames[3]["choices"][0]["finish_reason"] == "stop"  # rides on the last token
    assert frames[4]["choices"] == [] and frames[4]["usage"]["completion_tokens"] == 3
    assert frames[5] == "[DONE]" and len(frames) == 6
    assert len({f["id"] for f in frames[:-1]}) == 1
    assert stream(make_plan("hi"), usage=False)[-2]["choices"][0]["finish_reason"] == "stop"


def test_tool_stream_structure() -> None:
    frames = stream(make_plan("get_time and get_weather city=Rome", tools=[WEATHER, TIME]))
    deltas = [f["choices"][0]["delta"] for f in frames[1:-3]]
    heads = [d["tool_calls"][0] for d in deltas if "id" in d["tool_calls"][0]]
    assert [(h["index"], h["function"]["name"]) for h in heads] == \
        [(0, "get_weather"), (1, "get_time")]
    args = {0: "", 1: ""}
    for d in deltas:
        call = d["tool_calls"][0]
        args[call["index"]] += call["function"]["arguments"]
    assert args == {0: '{"city": "Rome"}', 1: '{"tz": "sim"}'}
    finish = frames[-3]["choices"][0]
    assert finish["delta"] == {"content": ""} and finish["finish_reason"] == "tool_calls"


def test_continuous_usage_counts_up() -> None:
    frames = stream(make_plan("a b [[sim reasoning=2]]"), continuous=True)
    counts = [f["usage"]["completion_tokens"] for f in frames[:-1]]
    assert counts == [0, 1, 2, 3, 4, 5, 6, 6]
    assert frames[-2]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 2}


def test_error_and_abort_endings() -> None:
    error = stream(make_plan("a b c [[sim fail=error:2]]"))
    assert error[-1] == "[DONE]" and not shape_errors(error[-2], SHAPES["inband_error"])
    assert all("finish_reason" not in f.get("choices", [{}])[0] or
               f["choices"][0]["finish_reason"] is None for f in error[:-2])
    abort = stream(make_plan("a b c [[sim fail=abort:1]]"))
    assert abort[-3]["choices"][0] == {"index": 0, "delta": {"content": ""}, "logprobs": None,
                                       "finish_reason": "abort", "stop_reason": None}
    assert [p for p in stream(make_plan("a [[sim fail=stall:1]]")) if p == "[DONE]"] == []


def test_hidden_reasoning_is_counted_not_sent() -> None:
    frames = stream(make_plan("hi", model="sim-reasoner", include_reasoning=False))
    assert not any("reasoning" in f["choices"][0]["delta"] for f in frames[:-2])
    assert frames[-2]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 8


def test_non_stream_content_null_for_auto_calls_and_empty_for_forced() -> None:
    auto = wire.completion(make_plan("get_weather", tools=[WEATHER]))["choices"][0]["message"]
    assert auto["content"] is None and auto["tool_calls"][0]["function"]["name"] == "get_weather"
    forced = wire.completion(make_plan("x", tools=[WEATHER], tool_choice="required"))
    assert forced["choices"][0]["message"]["content"] == ""
    cut = wire.completion(make_plan("get_weather", tools=[WEATHER], max_tokens=2))
    assert cut["choices"][0]["message"]["tool_calls"] == []  # an unfinished call is dropped
    assert cut["choices"][0]["finish_reason"] == "length"


# == wire: shapes against the recorded vLLM expectations ==========================================
def sim_shapes() -> dict[str, Any]:
    text = stream(make_plan("hi [[sim tokens=3]]"))
    reasoner = stream(make_plan("hi", model="sim-reasoner"))
    tool = stream(make_plan("get_weather", tools=[WEATHER]))
    field = {f: stream(make_plan(f"hi [[sim reasoning=1 reasoning_field={f}]]"))[1]
             for f in ("reasoning", "reasoning_content", "both")}
    legacy = SimConfig(reasoning_field="reasoning_content", legacy_shapes=True)
    return {
        "first_chunk": text[0], "content_delta": text[1], "finish_chunk_text": text[3],
        "usage_chunk": text[4], "usage_chunk_reasoning": reasoner[-2],
        "reasoning_delta_reasoning": field["reasoning"],
        "reasoning_delta_reasoning_content": field["reasoning_content"],
        "reasoning_delta_both": field["both"],
        "tool_call_first_delta": tool[1], "tool_call_args_delta": tool[2],
        "finish_chunk_tool_calls": tool[-3],
        "inband_error": stream(make_plan("a [[sim fail=error:1]]"))[-2],
        "completion": wire.completion(make_plan("hi")),
        "completion_tool_calls_auto": wire.completion(make_plan("get_weather", tools=[WEATHER])),
        "completion_reasoning_content": wire.completion(
            make_plan("hi", legacy, model="sim-reasoner")),
        "models": wire.models_list(("sim-model", "m2"), created=1, max_model_len=10),
        "embeddings": embeddings.response({"input": ["a", "b"]}, ("sim-model",),
                                          request_id="embd-" + "0" * 32, created=1),
    }


@pytest.mark.parametrize("name", list(sim_shapes()))
def test_shapes_match_recorded_vllm(name: str) -> None:
    assert shape_errors(sim_shapes()[name], SHAPES[name]) == []


def test_the_shape_checker_can_fail() -> None:
    good = stream(make_plan("hi"))[0]
    reordered = {"object": good["object"], **good}
    assert shape_errors(reordered, SHAPES["first_chunk"])
    assert shape_errors({**good, "id": "chatcmpl-xyz"}, SHAPES["first_chunk"])
    assert shape_errors({**good, "created": "1"}, SHAPES["first_chunk"])


@pytest.mark.parametrize(("golden", "directive", "extra"), [
    ("text", "", {}),
    ("length", "", {"max_tokens": 2}),
    ("reasoning_then_text", "[[sim reasoning=2]]", {}),
    ("reasoning_content_legacy", "[[sim reasoning=2 reasoning_field=reasoning_content]]", {}),
    ("tool_call", "get_weather", {"tools": [WEATHER]}),
    ("inband_error", "[[sim fail=error:2]]", {}),
])
def test_frames_match_the_golden_streams(golden: str, directive: str, extra: Any) -> None:
    """Frame by frame kind, the simulator's chunk has the golden chunk's keys and types."""
    recorded = data_payloads((GOLDEN / f"{golden}.sse").read_bytes())
    ours = stream(make_plan(f"one two three four {directive}", **extra), usage=True)
    assert collapse(kinds(ours)) == collapse(kinds(recorded)), (kinds(ours), kinds(recorded))
    by_kind = {kind: payload for kind, payload in zip(kinds(recorded), recorded, strict=True)}
    assert set(by_kind) <= set(kinds(ours))  # every recorded kind is checked below
    for kind, payload in zip(kinds(ours), ours, strict=True):
        if kind in by_kind:  # a golden may lack e.g. a plain content chunk (one-token answer)
            assert shape_errors(payload, golden_shape(by_kind[kind])) == [], kind


def kinds(payloads: list[Any]) -> list[str]:
    out = []
    for p in payloads:
        if p == "[DONE]" or "error" in p:
            out.append("done" if p == "[DONE]" else "error")
        elif not p["choices"]:
            out.append("usage")
        else:
            choice = p["choices"][0]
            fields = "+".join(k if k != "tool_calls" else
                              ("tool_head" if "id" in choice["delta"]["tool_calls"][0]
                               else "tool_args") for k in choice["delta"])
            out.append(fields + ("|finish" if choice["finish_reason"] else ""))
    return out


def collapse(names: list[str]) -> list[str]:
    """Runs of the same kind as one, and a run just before its own finishing chunk dropped, so
    answers of different lengths compare."""
    runs = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    return [n for i, n in enumerate(runs) if i + 1 == len(runs) or runs[i + 1] != n + "|finish"]


# == embeddings ===================================================================================
def test_embeddings_are_unit_deterministic_and_similar_for_similar_texts() -> None:
    a = embeddings.embed("The quick brown fox jumps over the lazy dog", 256)
    near = embeddings.embed("The quick brown fox jumped over the lazy dog!", 256)
    far = embeddings.embed("Quarterly revenue rose by four percent in Tokyo", 256)
    assert abs(embeddings.cosine(a, a) - 1) < 1e-9 and len(a) == 256
    assert embeddings.embed("The quick brown fox jumps over the lazy dog", 256) == a
    assert embeddings.cosine(a, near) > 0.8 > 0.3 > abs(embeddings.cosine(a, far))
    assert abs(embeddings.cosine(*[embeddings.embed("", 16)] * 2) - 1) < 1e-9


def test_embeddings_response_options() -> None:
    out = embeddings.response({"input": "hi there", "model": "sim-model", "dimensions": 4,
                               "encoding_format": "base64"}, ("sim-model",),
                              request_id="embd-x", created=1)
    packed = base64.b64decode(out["data"][0]["embedding"])
    assert len(struct.unpack("<4f", packed)) == 4 and out["usage"]["prompt_tokens"] == 2
    with pytest.raises(SimError) as info:
        embeddings.response({"input": "x", "model": "other"}, ("sim-model",),
                            request_id="e", created=1)
    assert info.value.status == 404
    for bad in ({"input": []}, {"input": [1.5]}, {"input": "x", "dimensions": 0}):
        with pytest.raises(SimError):
            embeddings.response(bad, ("sim-model",), request_id="e", created=1)
