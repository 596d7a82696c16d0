"""Codex CLI (`codex exec`) with a custom provider pointing at the proxy (`wire_api =
"responses"`), in a throw-away CODEX_HOME and working directory: a turn in which the model (the
simulator, steered by the prompt) calls Codex's `exec_command` tool, Codex runs the command and
sends its output back, and the turn completes with an answer built from that output.

Runs with the standard library only; `COMPAT_CODEX` is the codex launcher from the npm package.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from checks import API_KEY, BASE_URL, MODEL, check, expect, finish

CODEX = os.environ["COMPAT_CODEX"]
TIMEOUT = float(os.environ.get("COMPAT_CODEX_TIMEOUT", "120"))
MARKER = "compat-marker-7f3a.txt"
# The simulator calls a tool the user's text names; `cmd=ls` fills its one required argument
# and `args=required` leaves out the optional ones (docs/SIMULATOR.md).
PROMPT = "please call exec_command cmd=ls [[sim args=required]]"

CONFIG = f"""
model = "{MODEL}"
model_provider = "proxy"

[model_providers.proxy]
name = "responses-proxy"
base_url = "{BASE_URL}"
wire_api = "responses"
env_key = "COMPAT_API_KEY"
request_max_retries = 0
stream_max_retries = 0
"""


def run_turn(home: Path, work: Path) -> list[dict[str, object]]:
    (home / "config.toml").write_text(CONFIG)
    (work / MARKER).write_text("marker\n")
    env = {**os.environ, "CODEX_HOME": str(home), "COMPAT_API_KEY": API_KEY}
    done = subprocess.run(
        [CODEX, "exec", "--json", "--skip-git-repo-check",
         "--dangerously-bypass-approvals-and-sandbox", PROMPT],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=TIMEOUT, check=False)
    events = []
    for line in done.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    errors = [e for e in events if e.get("type") in ("error", "turn.failed")]
    expect(done.returncode == 0 and not errors,
           f"codex exited {done.returncode}: "
           f"{json.dumps(errors[-1]) if errors else done.stderr.strip()[-500:]}")
    return events


@check("codex exec runs a tool")
def _codex() -> None:
    with tempfile.TemporaryDirectory(prefix="compat-codex-") as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        events = run_turn(home, work)
    items = [e.get("item") or {} for e in events if e.get("type") == "item.completed"]
    commands = [i for i in items if i.get("type") == "command_execution"]
    expect(commands, f"no command ran; events: {[e.get('type') for e in events]}")
    expect(commands[0].get("exit_code") == 0 and MARKER in str(commands[0].get(
        "aggregated_output")), f"command item {json.dumps(commands[0])[:400]}")
    answers = [str(i.get("text")) for i in items if i.get("type") == "agent_message"]
    expect(any("Tool results: exec_command=" in a for a in answers), f"answers {answers}")
    expect(any(e.get("type") == "turn.completed" for e in events), "no turn.completed")


finish()
