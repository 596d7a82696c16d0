"""bench/spy.py: py-spy's raw output parsed, each sample put in the bucket of the first rule
one of its frames matches, and the summary's shares and µs per token; then a real recording of
a small busy process (skipped where py-spy is not installed)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import spy
from bench.spy import Frame, Rule, Stack

ROOT = ("_run_module_as_main (<frozen runpy>:198);<module> (proxy/__main__.py:3);"
        "main (proxy/cli.py:267);Server.run (uvicorn/server.py:86);"
        "Runner.run (asyncio/runners.py:118)")
STREAM = f"{ROOT};EventStream._stream (proxy/web/eventstream.py:108);" \
         "_streamed (proxy/services/responses/create.py:410);" \
         "Generation.run (proxy/services/generation/run.py:140)"
REQUEST = f"{ROOT};RequestResponseCycle.run_asgi (uvicorn/protocols/http/httptools_impl.py:409);" \
          "AccessLog.__call__ (proxy/web/middleware/access.py:60);" \
          "create (proxy/web/routes/responses.py:24)"
SEND = "ServerErrorMiddleware.__call__.<locals>._send (starlette/middleware/errors.py:161);" \
       "RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py:544)"


def stack(text: str) -> Stack:
    parsed = spy.parse_raw(f"{text} 1")
    assert len(parsed) == 1
    return parsed[0][0]


def test_raw_lines_are_parsed_into_frames_and_counts() -> None:
    raw = "\n".join([
        "<module> (h.py:9);g (h.py:8);f (h.py:3) 171",
        'process 42:"python -m proxy serve";f (h.py:4) 5',  # --subprocesses' header: dropped
        "outer.<locals>.inner (pkg/mod.py) 2",  # no line number (py-spy --nolineno)
        " 4",  # an empty stack
        "not a sample",
    ])
    parsed = spy.parse_raw(raw)
    assert parsed == [
        ((Frame("<module>", "h.py", 9), Frame("g", "h.py", 8), Frame("f", "h.py", 3)), 171),
        ((Frame("f", "h.py", 4),), 5),
        ((Frame("outer.<locals>.inner", "pkg/mod.py", None),), 2),
    ]
    assert spy.parse_frame("Generation.run (proxy/services/generation/run.py:140)") == Frame(
        "Generation.run", "proxy/services/generation/run.py", 140)


def test_rules_match_qualified_names_and_leaf_rules_only_the_leaf() -> None:
    rule = Rule("x", ("proxy/services/eventlog/recorder.py",), ("Recorder.add",))
    assert rule.matches(stack(f"{STREAM};Recorder.add (proxy/services/eventlog/recorder.py:80)"))
    assert not rule.matches(
        stack(f"{STREAM};Recorder.finish (proxy/services/eventlog/recorder.py:90)"))
    suffix = Rule("x", ("starlette/",), ("_send",))
    assert suffix.matches(stack(SEND))
    assert not suffix.matches(stack("Foo.my_send (starlette/x.py:1)"))
    leaf = Rule("x", ("asyncio/runners.py",), where="leaf")
    assert leaf.matches(stack(ROOT))
    assert not leaf.matches(stack(STREAM))


@pytest.mark.parametrize(("text", "bucket"), [
    # the send from inside the stream's generators is send, not the generators
    (f"{STREAM};{SEND}", spy.SEND),
    (SEND, spy.SEND),  # a torn stack still has its leaf's frames
    (f"{STREAM};Generation._read (proxy/services/generation/run.py:236);"
     "Response.aiter_raw (proxy/upstream/http1.py:504)",
     spy.READ),
    (f"{ROOT};Connection.data_received (proxy/upstream/http1.py:375)", spy.READ),
    (f"{STREAM};Recorder.add (proxy/services/eventlog/recorder.py:30)", spy.STORE),
    (f"{ROOT};LoopSupervisor._keep (proxy/services/process/loops.py:93);"
     "EventLogHub._run (proxy/services/eventlog/writer.py:164);_packed (proxy/store/redis.py:512)",
     spy.STORE),
    (f"{REQUEST};AbstractConnection.pack_command (redis/asyncio/connection.py:1357)", spy.STORE),
    (f"{STREAM};Generation._encoded (proxy/services/generation/run.py:157)", spy.ENCODE),
    (f"{STREAM};frames (proxy/core/events/sse.py:25)", spy.ENCODE),
    (f"{STREAM};Generation._read (proxy/services/generation/run.py:237);"
     "ChatStreamReader.feed (proxy/core/events/chatstream.py:27);"
     "DataDecoder.feed (proxy/core/events/sse.py:44)",
     spy.PARSE),
    (STREAM, spy.GLUE),
    (f"{ROOT};EventStream._stream (proxy/web/eventstream.py:108);"
     "_relay (proxy/services/fleet/passthrough.py:80)", spy.GLUE),
    (REQUEST, spy.SETUP),
    (f"{REQUEST};parse_request (proxy/core/request/create.py:50)", spy.SETUP),
    (f"{REQUEST};Logger._log (logging/__init__.py:1600)", spy.SETUP),
    (ROOT, spy.LOOP),
    (f"{ROOT};LoopSupervisor._keep (proxy/services/process/loops.py:93)", spy.OTHER),
])
def test_each_sample_goes_to_the_first_matching_rule(text: str, bucket: str) -> None:
    assert spy.bucket_of(stack(text)) == bucket


def test_every_rule_names_a_known_bucket() -> None:
    assert {rule.bucket for rule in spy.RULES} <= set(spy.BUCKETS)
    assert spy.OTHER not in {rule.bucket for rule in spy.RULES}


def test_the_summary_gives_shares_and_microseconds_per_token() -> None:
    raw = "\n".join([
        f"{STREAM};{SEND} 50",
        f"{STREAM};Recorder.add (proxy/services/eventlog/recorder.py:80) 30",
        f"{ROOT} 10",
        "Recorder.add (proxy/services/eventlog/recorder.py:79) 10",  # torn: no root
    ])
    summary = spy.summarize("row", spy.parse_raw(raw), cpu_ms_per_1k=40.0, top=3)
    assert summary.samples == 100
    assert summary.torn_pct == 10.0
    assert summary.buckets[spy.SEND] == 50.0 and summary.buckets[spy.STORE] == 40.0
    assert summary.buckets[spy.LOOP] == 10.0 and sum(summary.buckets.values()) == 100.0
    own = dict(summary.own)
    assert own["RequestResponseCycle.send (uvicorn/protocols/http/httptools_impl.py)"] == 50.0
    # both lines, one function
    assert own["Recorder.add (proxy/services/eventlog/recorder.py)"] == 40.0
    inclusive = dict(summary.inclusive)
    assert inclusive["EventStream._stream (proxy/web/eventstream.py)"] == 80.0
    assert not any("runners.py" in label for label in inclusive)  # entry frames left out
    assert dict(summary.lines)["Recorder.add (proxy/services/eventlog/recorder.py:80)"] == 30.0
    assert summary.us(50.0) == 20.0  # 40 ms per 1k tokens = 40 µs per token
    text = "\n".join(spy.markdown(summary))
    assert "| uvicorn send / transport write | 50.0 | 20.00 |" in text
    assert spy.summarize("empty", [], None).samples == 0
    assert spy.summarize("x", spy.parse_raw(raw), None).us(10.0) is None


# -- a real recording ----------------------------------------------------------------------------

EXE = spy.find_py_spy()
BUSY = ("import time\n"
        "def spin():\n"
        "    end = time.monotonic() + 30\n"
        "    while time.monotonic() < end:\n"
        "        pass\n"
        "spin()\n")


@pytest.fixture
def busy(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


@pytest.mark.skipif(EXE is None, reason="py-spy is not installed")
def test_a_recording_of_a_busy_process_names_its_function(
        busy: subprocess.Popen[bytes], tmp_path: Path) -> None:
    assert EXE is not None
    recorder = spy.Spy(EXE, tmp_path / "out")
    with recorder.record("busy row", busy.pid) as recording:
        time.sleep(1.5)  # the "row": py-spy attaches and samples meanwhile
    if recording.error is not None and "Permission" in recording.log.read_text():
        pytest.skip("py-spy may not read other processes here (ptrace)")
    assert recording.error is None, recording.log.read_text()
    summary = spy.summarize("busy", recording.stacks(), None)
    assert summary.samples > 0
    assert summary.own[0][0] == "spin (busy.py)"
    path = tmp_path / "summary.md"
    spy.write_markdown(path, [summary], ["header"])
    assert path.read_text().startswith("header\n")
    assert "spin (busy.py)" in path.read_text()
