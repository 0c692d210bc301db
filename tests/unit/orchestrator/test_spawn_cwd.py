"""`agents__spawn(cwd=...)` at the orchestrator: recorded where the target's process reads it."""

from pathlib import Path

import msgspec

from agentproc.instance import Instance
from goondan.paths import StatePaths, SwarmPaths
from ipc import wire
from orchestrator.instances import InstanceRegistry


def control(command: str, args: dict[str, object]) -> wire.Control:
    return wire.Control(command, msgspec.Raw(msgspec.msgpack.encode(args)))


def spawn(registry: InstanceRegistry, **args: object) -> wire.ControlReply:
    return registry.handle("a", control("spawn", {"target": "b", "owner": "o", **args}), {"a", "b"})


def workdir_of(dirs: SwarmPaths, key: str, agent: str) -> Path:
    """The tools' working directory the agent's process gives the instance when it loads it."""
    directory = dirs.conversation_dir(key, agent)
    new = not directory.parent.is_dir()
    return Instance(key, directory, workdir=dirs.workdir(key), new=new).load().workdir


def test_a_spawned_cwd_becomes_the_instance_workdir(tmp_path: Path) -> None:
    dirs = StatePaths(tmp_path).swarm("default")
    registry = InstanceRegistry(dirs)
    here = tmp_path / "work" / "sub"
    reply = spawn(registry, instanceKey="job", cwd=str(here))
    assert reply.ok and isinstance(reply.result, wire.Spawned)
    assert reply.result.cwd == str(here)
    assert workdir_of(dirs, "job", "b") == here
    assert workdir_of(dirs, "job", "a") == dirs.workdir("job")  # only the target's
    assert workdir_of(dirs, "other", "b") == dirs.workdir("other")
    listed = registry.handle("a", control("list", {"owner": "o"}), {"a", "b"})
    assert isinstance(listed.result, wire.Listed) and listed.result.agents[0].cwd == str(here)


def test_a_relative_cwd_is_refused(tmp_path: Path) -> None:
    registry = InstanceRegistry(StatePaths(tmp_path).swarm("default"))
    reply = spawn(registry, instanceKey="job", cwd="sub")
    assert not reply.ok and reply.error is not None and reply.error.code == "E_BAD_REQUEST"
    assert "absolute" in reply.error.message
