"""The views an agent process asks for at start (its swarm, the swarm's agents and their
names) are made once, when the template loads the bundle, so a forked agent reads them without
copying the template's pages: in a 1,000-agent bundle, walking every resource copied ~3 MiB of
them into each agent."""

import subprocess
import sys
from pathlib import Path

from goondan.bundle.cache import load_bundle_cached

AGENTS = 1000


def write_swarm(directory: Path, count: int) -> list[str]:
    names = [f"agent-{i:04d}" for i in range(count)]
    model = (
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: echo}\nspec:\n"
        "  provider: scripted\n  model: scripted-v1\n"
    )
    refs = "".join(f'    - ref: "Agent/{name}"\n' for name in reversed(names))
    swarm = (
        "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: default}\nspec:\n"
        f'  entryAgent: "Agent/{names[0]}"\n  agents:\n{refs}'
    )
    (directory / "goondan.yaml").write_text("---\n".join([model, swarm]))
    for chunk in range(0, count, 90):
        docs = [
            f"apiVersion: goondan.ai/v1\nkind: Agent\nmetadata: {{name: {name}}}\n"
            'spec:\n  modelConfig: {modelRef: "Model/echo"}\n'
            for name in names[chunk : chunk + 90]
        ]
        part = directory / "agents" / str(chunk // 90)
        part.mkdir(parents=True)
        (part / "agents.yaml").write_text("---\n".join(docs))
    return names


def test_swarm_views_are_made_once_and_sorted(tmp_path: Path) -> None:
    names = write_swarm(tmp_path, 30)
    bundle = load_bundle_cached(tmp_path)
    swarm = bundle.select_swarm(None)
    agents = bundle.swarm_agents(swarm)
    assert list(agents) == list(reversed(names))  # the swarm's own order
    assert bundle.swarm_agents(swarm) is agents
    assert bundle.swarm_agent_names(swarm) == tuple(sorted(names))
    assert bundle.swarm_agent_names(swarm) is bundle.swarm_agent_names(swarm)
    assert [r.name for r in bundle.of_kind("Swarm")] == ["default"]
    assert len(bundle.of_kind("Agent")) == 30


# In a fresh interpreter, as the template is: in a test worker that has run hundreds of tests
# first, the child's own allocations land in a fragmented heap and dirty pages of their own.
FORKED_AGENT = """
import gc, os, sys
from pathlib import Path
from goondan.bundle.cache import load_bundle_cached

def private_dirty_kib():
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])
    raise AssertionError("no Private_Dirty in smaps_rollup")

directory = Path(sys.argv[1])
bundle = load_bundle_cached(directory)  # as the template does, before it forks
gc.collect()
gc.freeze()  # as the template does: no collection walks the bundle in the child
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # what `agentproc.main.build_definition` reads of the swarm
    try:
        os.close(read)
        before = private_dirty_kib()
        again = load_bundle_cached(directory)
        swarm = again.select_swarm(None)
        agent = again.swarm_agents(swarm)["agent-0500"]
        names = again.swarm_agent_names(swarm)
        callable_agents = tuple(n for n in names if n != agent.name)
        assert len(callable_agents) == int(sys.argv[2]) - 1
        os.write(write, str(private_dirty_kib() - before).encode())
    finally:
        os._exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    print(pipe.read() or "-1")
os.waitpid(pid, 0)
"""


def test_a_forked_agent_lists_a_1000_agent_swarm_without_copying_the_bundle(
    tmp_path: Path,
) -> None:
    write_swarm(tmp_path, AGENTS)
    done = subprocess.run(
        [sys.executable, "-c", FORKED_AGENT, str(tmp_path), str(AGENTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    copied_kib = int(done.stdout)
    # ~3,000 KiB when every agent resource was walked; the bundle's file check and the
    # callable list cost ~1,000 at most.
    assert 0 <= copied_kib < 1500, copied_kib
