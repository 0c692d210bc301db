"""Extensions: loading in order with merged config, the api's five surfaces, start errors."""

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentproc.extensions import (
    EventBus,
    ExtensionStartError,
    load_extensions,
    plan_extensions,
)
from agentproc.instance import Instance
from agentproc.middleware import Pipeline
from agentproc.tool_registry import ToolRegistry
from goondan.bundle import load_bundle
from tests.unit.agentproc.loop_kit import ScriptedModel, agent, call, reply, tool_results, turn

AGENT = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  extensions:
%(extensions)s
%(required)s
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/a
  agents: [{ref: Agent/a}]
"""


def bundle(tmp_path: Path, extensions: dict[str, str], refs: str, required: str = ""):
    """A bundle with one agent using `refs`; `extensions` maps name -> module source."""
    docs = []
    for name, source in extensions.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        docs.append(
            "apiVersion: goondan.ai/v1\nkind: Extension\n"
            f"metadata: {{name: {name}}}\nspec:\n  entry: ./{name}.py\n"
            "  config: {greeting: hello, level: 1}\n"
        )
    text = AGENT % {"extensions": textwrap.indent(refs, "    "), "required": required}
    (tmp_path / "goondan.yaml").write_text("---\n".join([text, *docs]))
    loaded = load_bundle(tmp_path)
    return loaded, loaded.local("Agent", "a")


async def load(tmp_path, extensions, refs, required=""):
    loaded, agent_resource = bundle(tmp_path, extensions, refs, required)
    pipeline, registry, bus = Pipeline(), ToolRegistry([]), EventBus()
    plans = plan_extensions(loaded, agent_resource)
    names = await load_extensions(
        plans, agent_name="a", pipeline=pipeline, registry=registry, bus=bus
    )
    return names, pipeline, registry, bus, plans


RECORD = """\
import json, pathlib
def register(api, config):
    with open(pathlib.Path(__file__).with_name("calls.txt"), "a") as f:
        f.write(json.dumps([api.name, config]) + "\\n")
"""


async def test_extensions_load_in_declared_order_with_merged_config(tmp_path):
    names, *_ = await load(
        tmp_path,
        {"first": RECORD, "second": RECORD},
        "- ref: Extension/second\n  config: {level: 2}\n- ref: Extension/first\n",
    )
    assert names == ["second", "first"]
    calls = [json.loads(line) for line in (tmp_path / "calls.txt").read_text().splitlines()]
    assert calls == [
        ["second", {"greeting": "hello", "level": 2}],
        ["first", {"greeting": "hello", "level": 1}],
    ]


async def test_async_register_is_awaited_before_the_next(tmp_path):
    slow = """\
import asyncio, pathlib
async def register(api, config):
    await asyncio.sleep(0.05)
    pathlib.Path(__file__).with_name("calls.txt").write_text("slow\\n")
"""
    fast = """\
import pathlib
def register(api, config):
    path = pathlib.Path(__file__).with_name("calls.txt")
    path.write_text(path.read_text() + "fast\\n")
"""
    await load(
        tmp_path, {"slow": slow, "fast": fast}, "- ref: Extension/slow\n- ref: Extension/fast\n"
    )
    assert (tmp_path / "calls.txt").read_text() == "slow\nfast\n"


@pytest.mark.parametrize(
    "source, code, words",
    [
        ("x = 1\n", "E_EXT_LOAD", "must define `def register(api, config)"),
        ("import not_a_module_anywhere\n", "E_EXT_LOAD", "importing"),
        ("def register(api, config):\n    raise RuntimeError('no db')\n", "E_EXT_INIT", "no db"),
        (
            "from goondan import ExtensionConfigError\n"
            "def register(api, config):\n    raise ExtensionConfigError('level must be low')\n",
            "E_EXT_CONFIG",
            "level must be low",
        ),
        (
            "def register(api, config):\n    api.pipeline.register('step', lambda ctx: 1)\n",
            "E_EXT_INIT",
            "must be an async function",
        ),
        (
            "def register(api, config):\n"
            "    api.tools.register({'name': 'bad name', 'description': 'd'}, lambda c, a: 1)\n",
            "E_EXT_INIT",
            "bad name",
        ),
    ],
)
async def test_start_errors_name_the_extension(tmp_path, source, code, words):
    with pytest.raises(ExtensionStartError) as caught:
        await load(tmp_path, {"broken": source}, "- ref: Extension/broken\n")
    assert caught.value.code == code
    assert str(caught.value).startswith(f"{code}: Extension/broken")
    assert words in str(caught.value)


async def test_required_tools_bring_the_guard_in(tmp_path):
    *_, plans = await load(
        tmp_path,
        {"first": RECORD},
        "- ref: Extension/first\n",
        "  requiredTools: [calc__add, calc__mul]",
    )
    assert [(p.resource.name, p.resource.package) for p in plans] == [
        ("first", "__local__"),
        ("required-tools-guard", "@goondan/base"),
    ]
    assert plans[1].config == {"requiredTools": ["calc__add", "calc__mul"], "mode": "all"}


async def test_required_tools_merge_into_a_listed_guard(tmp_path):
    refs = (
        "- ref: {kind: Extension, name: required-tools-guard, package: '@goondan/base'}\n"
        "  config: {requiredTools: [a__b], errorMessage: call it}\n"
    )
    *_, plans = await load(tmp_path, {}, refs, "  requiredTools: [c__d]")
    [guard] = plans
    assert guard.config["requiredTools"] == ["a__b", "c__d"]
    assert guard.config["mode"] == "all" and guard.config["errorMessage"] == "call it"


# -- the api, in turns ---------------------------------------------------------------------------

TOOLS_AND_STATE = """\
from goondan import ToolResult

def register(api, config):
    def counter(ctx, args):
        state = api.state.get() or {"n": 0}
        state["n"] += 1
        api.state.set(state)
        return state["n"]

    async def late_tool(ctx):
        if ctx.step_index == 0:
            api.tools.register(
                {"name": "ext__late", "description": "appears later",
                 "parameters": {"type": "object", "properties": {}}},
                lambda c, a: "late ran",
            )
        return await ctx.next()

    api.tools.register(
        {"name": "ext__count", "description": "count calls",
         "parameters": {"type": "object", "properties": {}}},
        counter,
    )
    api.pipeline.register("step", late_tool)
    seen = []
    api.events.on("tool.completed", lambda payload: seen.append(payload["toolName"]))
    api.events.on("my-ext.hello", lambda who: seen.append(f"hello {who}"))
    api.events.emit("my-ext.hello", "world")

    async def report(ctx):
        result = await ctx.next()
        state = api.state.get() or {}
        state["seen"] = list(seen)
        api.state.set(state)
        return result

    api.pipeline.register("turn", report)
"""


async def test_tools_state_and_events(tmp_path):
    loaded, agent_resource = bundle(tmp_path, {"ext": TOOLS_AND_STATE}, "- ref: Extension/ext\n")
    model = ScriptedModel(
        reply(None, call("ext__count", {}, "c1")),
        reply(None, call("ext__late", {}, "c2"), call("ext__count", {}, "c3")),
        reply("done"),
    )
    definition = agent(model)
    assert definition.bus is not None
    await load_extensions(
        plan_extensions(loaded, agent_resource),
        agent_name="a",
        pipeline=definition.pipeline,
        registry=definition.registry,
        bus=definition.bus,
    )
    home = tmp_path / "state"
    first = Instance("k1", home / "k1").load()
    await turn(definition, first)
    # registered in step 0: offered from step 1 on
    assert [t.name for t in model.requests[0].tools] == ["ext__count"]
    assert [t.name for t in model.requests[1].tools] == ["ext__count", "ext__late"]
    assert [r["output"] for r in tool_results(model, 2)] == [1, "late ran", 2]
    state_file = home / "k1" / "extensions" / "ext.json"
    saved = json.loads(state_file.read_text())
    assert saved["n"] == 2
    # Step 1's two calls run at once (sync handlers, in threads): either may complete first.
    assert saved["seen"][:2] == ["hello world", "ext__count"]
    assert sorted(saved["seen"][2:]) == ["ext__count", "ext__late"]

    # per instance: another instance starts from nothing
    model.queue(reply(None, call("ext__count", {}, "c4")), reply("done"))
    await turn(definition, Instance("k2", home / "k2").load())
    assert json.loads((home / "k2" / "extensions" / "ext.json").read_text())["n"] == 1

    # survives a restart: a fresh Instance object reads the file
    model.queue(reply(None, call("ext__count", {}, "c5")), reply("done"))
    await turn(definition, Instance("k1", home / "k1").load())
    assert json.loads(state_file.read_text())["n"] == 3


async def test_state_outside_an_instance_is_refused(tmp_path):
    source = "def register(api, config):\n    api.state.get()\n"
    with pytest.raises(ExtensionStartError, match="api.state belongs to an instance"):
        await load(tmp_path, {"early": source}, "- ref: Extension/early\n")


async def test_state_must_be_a_json_object(tmp_path):
    from agentproc.extension_state import ExtensionStateStore

    store = ExtensionStateStore(tmp_path)
    with pytest.raises(TypeError, match="JSON object"):
        store.set("x", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="JSON-serializable"):
        store.set("x", {"f": object()})
    assert store.get("x") is None
    store.set("x", {"a": 1})
    value = store.get("x")
    assert value is not None
    value["a"] = 99  # a copy: only set() changes the state
    assert store.get("x") == {"a": 1}
    store.save()
    assert json.loads((tmp_path / "extensions" / "x.json").read_text()) == {"a": 1}
    store.set("x", None)
    store.save()
    assert not (tmp_path / "extensions" / "x.json").exists()


async def test_event_bus_isolates_failures_and_unsubscribes():
    bus = EventBus()
    got = []

    def broken(payload):
        raise RuntimeError("handler bug")

    async def later(payload):
        got.append(("async", payload))

    bus.on("x", broken)
    off = bus.on("x", got.append)
    bus.on("x", later)
    bus.emit("x", 1)
    off()
    bus.emit("x", 2)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert got == [1, ("async", 1), ("async", 2)]


async def test_runtime_events_reach_subscribers(tmp_path):
    definition = agent(ScriptedModel(reply("hi")))
    seen: list[dict[str, Any]] = []
    assert definition.bus is not None
    definition.bus.on("turn.completed", seen.append)
    await turn(definition, tmp_path)
    [payload] = seen
    assert payload["agentName"] == "tester" and payload["stepCount"] == 1
    assert payload["type"] == "turn.completed" and payload["turnId"]


def test_with_fsync_durability_an_instance_saves_its_extension_state_durably(tmp_path, fsynced):
    directory = tmp_path / "k"
    instance = Instance("k", directory, fsync_events=True).load()
    instance.state.set("memory", {"facts": ["42"]})
    instance.end_turn()
    saved = directory / "extensions" / "memory.json"
    assert saved.read_bytes() == b'{"facts":["42"]}'
    assert fsynced == [str(saved) + ".tmp", str(saved.parent)]
