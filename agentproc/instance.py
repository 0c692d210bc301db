"""One instance (conversation) of this agent and everything kept for it:

    <state-root>/swarms/<swarm>/instances/<instanceKey>/
        <agent>+events.jsonl, <agent>+base.jsonl    the conversation (event sourced; older
                                                    ones: base/events.jsonl in <agent>/)
        <agent>/                                    made when something below is written
            extensions/<name>.json                  extension state
            pending-tools.json                      long-running tool calls not yet in the
                                                    conversation

Its turn / step / tool events go to the agent's runtime event log (`runtime_events`), shared
by the instances of the process.

The inbox holds messages that arrived between steps (async agent responses, tool
completions); the loop adds them to the conversation before its next step or turn.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from agentproc.conversation import Conversation
from agentproc.extension_state import ExtensionStateStore
from agentproc.messages import Message
from agentproc.runtime_events import RuntimeEventLog
from agentproc.spare_files import SpareFiles
from agentproc.tool_jobs import ToolJobs
from goondan.paths import recorded_cwd
from goondan.settings import DEFAULTS


class Instance:
    def __init__(
        self,
        key: str,
        directory: Path,
        *,
        workdir: Path | None = None,
        fsync_events: bool = False,
        events: RuntimeEventLog | None = None,
        inbox_limit: int = DEFAULTS.agent.inbox_limit,
        new: bool = False,
        spares: SpareFiles | None = None,
        events_fd: int | None = None,
        fsync_syncs_new_entries: bool = False,
    ) -> None:
        """`workdir`: the tools' working directory, unless `agents__spawn(cwd=...)` recorded
        another for the instance (`load` reads it). `events`: the agent process's runtime
        event log; without one (an instance on its own, as in tests), a log in the instance's
        directory. Past `inbox_limit` messages waiting for the next step, the oldest is
        dropped. `new`: the caller knows nothing of it is stored (the instance key's directory
        is not there), so `load` looks for nothing. `spares`: the agent's files made ahead
        for new conversations (`spare_files`); `events_fd`: one the caller put in place as
        the key's directory, its events file open (`new` implied).
        `fsync_syncs_new_entries`: as for `Conversation`."""
        self.key = key
        self.directory = directory
        self.workdir = workdir or directory  # the instance's workspace (tools' cwd)
        self._new = new or events_fd is not None
        self.conversation = Conversation(
            directory,
            fsync_events=fsync_events,
            new=new,
            spares=spares,
            events_fd=events_fd,
            fsync_syncs_new_entries=fsync_syncs_new_entries,
        )
        self._own_events = events is None
        self.events = RuntimeEventLog(directory) if events is None else events
        self.state = ExtensionStateStore(directory, durable=fsync_events)
        self.jobs = ToolJobs(directory, self.deliver, durable=fsync_events)
        self._inbox: list[Message] = []
        self._inbox_limit = inbox_limit
        self.last_turn_at = 0.0  # time.monotonic() when the last turn ended

    def load(self) -> Instance:
        """Read what is stored of the instance; a new one has nothing yet (files come when
        written). A new conversation costs a look for each file it could have, so there are
        as few looks as the layout allows: none for a `new` instance, and nothing inside the
        instance's directory when that is not there."""
        if self._new:
            return self
        if self.conversation.stored():
            self.conversation.load()
        if self.directory.is_dir():  # its other state, if any (pending tool jobs, a cwd)
            self.workdir = recorded_cwd(self.directory) or self.workdir
            self.jobs.load(self.conversation.messages)
        return self

    def deliver(self, message: Message) -> None:
        """A message for the next step (or turn): it joins the conversation then."""
        self._inbox.append(message)
        if len(self._inbox) > self._inbox_limit:
            dropped = self._inbox.pop(0)
            structlog.get_logger().warning(
                "inbox full; oldest message dropped", instanceKey=self.key, messageId=dropped.id
            )

    def has_pending(self) -> bool:
        """A message waiting for the next step, or a long-running tool open."""
        return bool(self._inbox) or self.jobs.has_open()

    def can_unload(self) -> bool:
        """Nothing lives only in memory."""
        return not self.has_pending()

    def take_inbox(self) -> list[Message]:
        taken, self._inbox = self._inbox, []
        return taken

    def end_turn(self) -> None:
        """Persist what the turn changed besides the conversation (written as it changed)."""
        self.state.save()
        self.jobs.settle_delivered(self.conversation.messages)

    def close(self, *, save: bool = True) -> None:
        """Stop its long-running tools and close its files: saved and synced first, unless the
        instance is being deleted (`save=False`)."""
        self.jobs.cancel_all()
        if save:
            self.state.save()
            self.conversation.sync()
        self.conversation.close()
        if self._own_events:
            self.events.close()
