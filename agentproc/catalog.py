"""The Tool Catalog of a step, and the agent's tool policy on top of it.

Each step starts from the agent's config tools (declared order), then the tools extensions
registered (config wins on a name clash), then runtime tools the instance needs right now
(`tool-jobs__poll` while jobs are open). `Agent.spec.toolPolicy` filters that list and is
checked again at call time, after step middleware had its say: deny wins over allow, and a
call outside the policy gets a structured `E_TOOL_POLICY_DENIED`. A call to a tool in
`requireApproval` waits for a human first (`agentproc.approvals`).
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase

from agentproc.tool_registry import ToolRegistry
from goondan.bundle.model import ToolPolicySpec
from goondan.tools import ToolCatalogItem, ToolErrorInfo, ToolResult
from ipc.error_codes import ErrorCode

_OPEN = ToolPolicySpec()


class ToolPolicy:
    """Allow / deny by full tool name or glob; deny wins."""

    def __init__(self, spec: ToolPolicySpec = _OPEN) -> None:
        self.allow = spec.allow
        self.deny = spec.deny
        self.allow_registry_calls = spec.allow_registry_calls
        self.require_approval = spec.require_approval
        self.approval_timeout_s = spec.approval_timeout_seconds
        self._cache: dict[str, bool] = {}

    @property
    def is_open(self) -> bool:
        return self.allow is None and not self.deny

    def permits(self, name: str) -> bool:
        verdict = self._cache.get(name)
        if verdict is None:
            denied = any(fnmatchcase(name, pattern) for pattern in self.deny)
            allowed = self.allow is None or any(fnmatchcase(name, p) for p in self.allow)
            verdict = self._cache[name] = allowed and not denied
        return verdict

    def needs_approval(self, name: str) -> bool:
        """Whether a call to `name` waits for a human (`requireApproval`)."""
        return any(fnmatchcase(name, pattern) for pattern in self.require_approval)

    def refusal(self, name: str) -> ToolResult | None:
        """The error for a call the policy refuses, or None."""
        if self.is_open or self.permits(name):
            return None
        return ToolResult.fail(
            ToolErrorInfo(
                code=ErrorCode.E_TOOL_POLICY_DENIED,
                name="ToolPolicyError",
                message=f"Tool '{name}' is not allowed by this agent's tool policy.",
                suggestion="Use one of the tools offered in this step; the operator sets "
                "Agent.spec.toolPolicy (allow / deny).",
            )
        )

    def narrowed(self, other: ToolPolicySpec) -> ToolPolicy:
        """This policy and `other` together (a Connection's policy for the turns it starts):
        a tool must pass both; `other` cannot widen registry calls."""
        return _BothPolicies(self, ToolPolicy(other))

    def unmatched(self, names: Iterable[str]) -> list[str]:
        """Patterns that match none of `names` (typos, removed tools): warned at start."""
        known = list(names)
        patterns = [*(self.allow or ()), *self.deny, *self.require_approval]
        return [p for p in patterns if not any(fnmatchcase(n, p) for n in known)]


class CatalogBuilder:
    """Builds each step's catalog; the list is rebuilt only when the registry changed."""

    def __init__(self, registry: ToolRegistry, policy: ToolPolicy) -> None:
        self.registry = registry
        self.policy = policy
        self._cached: tuple[tuple[int, frozenset[str]], tuple[ToolCatalogItem, ...]] | None = None

    def build(self, runtime_tools: frozenset[str] = frozenset()) -> list[ToolCatalogItem]:
        """A fresh list (step middleware may change it) for this step."""
        key = (self.registry.version, runtime_tools)
        if self._cached is None or self._cached[0] != key:
            items: list[ToolCatalogItem] = []
            for entry in self.registry.entries():
                if entry.source == "runtime" and entry.name not in runtime_tools:
                    continue
                if self.policy.permits(entry.name):
                    items.append(entry.catalog_item())
            self._cached = (key, tuple(items))
        return list(self._cached[1])


class _BothPolicies(ToolPolicy):
    def __init__(self, first: ToolPolicy, second: ToolPolicy) -> None:
        super().__init__()
        self.allow_registry_calls = first.allow_registry_calls
        self._first, self._second = first, second
        # A Connection adds tools that need approval and may shorten the wait, never the
        # other way round.
        self.require_approval = (*first.require_approval, *second.require_approval)
        timeouts = [t for t in (first.approval_timeout_s, second.approval_timeout_s) if t]
        self.approval_timeout_s = min(timeouts) if timeouts else None

    @property
    def is_open(self) -> bool:
        return self._first.is_open and self._second.is_open

    def permits(self, name: str) -> bool:
        return self._first.permits(name) and self._second.permits(name)
