"""The quickstart, as the README shows it: one input, a tool call and a delegation."""

import json

from agentproc.conversation import read_messages
from goondan.paths import stored_agents
from tests.e2e.conftest import QUICKSTART, goondan


def test_validate_the_quickstart():
    proc = goondan("validate", str(QUICKSTART), "--format", "json", check=True)
    assert json.loads(proc.stdout) == {"valid": True, "errors": [], "warnings": []}


def test_one_shot_run_answers_with_a_tool_call_and_a_delegation(state_root):
    proc = goondan(
        "run",
        str(QUICKSTART),
        "--state-root",
        str(state_root),
        "--input",
        "What is 19 plus 23? Ask the researcher for a fun fact too.",
        check=True,
    )
    answer = proc.stdout.strip()
    # 42 came from the calc__add tool in the assistant's process ...
    assert "19 plus 23 is 42" in answer
    # ... and the fact from the researcher's own process and its numbers__describe tool.
    assert "42 is not a prime, is written 101010 in binary" in answer
    # The conversations are on disk, one per agent.
    keys = state_root.glob("swarms/default/instances/*")
    stored = {d.name: read_messages(d) for key in keys for d in stored_agents(key)}
    assert sorted(stored) == ["assistant", "researcher"]
    assert (stored["assistant"][0].content or "").startswith("What is 19 plus 23?")
    assert "101010 in binary" in (stored["researcher"][-1].content or "")
