"""Typed Goondan resources, as the rest of the product sees them after loading.

The loader (`loader.py`) parses YAML and the validator (`validate.py`) checks it; what comes out is
one `Bundle` holding these Structs. Field names are snake_case here and camelCase in YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec

KINDS = ("Package", "Model", "Agent", "Swarm", "Tool", "Extension", "Connector", "Connection")
Kind = Literal["Package", "Model", "Agent", "Swarm", "Tool", "Extension", "Connector", "Connection"]
LOCAL_SCOPE = "__local__"


class ObjectRef(msgspec.Struct, frozen=True):
    """`Kind/name`, or `{kind, name, package}`; `package=None` means the referrer's own scope."""

    kind: str
    name: str
    package: str | None = None

    def __str__(self) -> str:
        scope = f" (package {self.package})" if self.package else ""
        return f"{self.kind}/{self.name}{scope}"


class SecretRef(msgspec.Struct, frozen=True):
    ref: str  # "Secret/<name>"
    key: str


class ValueSource(msgspec.Struct, frozen=True):
    """Exactly one of `value`, `env`, `secret_ref` is set (the validator enforces it)."""

    value: str | None = None
    env: str | None = None
    secret_ref: SecretRef | None = None


class Source(msgspec.Struct, frozen=True):
    """Where a resource was declared: for error messages and for resolving `entry` paths."""

    file: Path
    line: int  # 1-based line of the document's first key
    doc_index: int
    root: Path  # the directory `entry` paths are relative to (bundle root, or a package's root)


class Metadata(msgspec.Struct, frozen=True):
    name: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class PackageDependency(msgspec.Struct, frozen=True):
    name: str
    version: str = "*"


class PackageRegistry(msgspec.Struct, frozen=True):
    url: str


class PackageSpec(msgspec.Struct, frozen=True):
    version: str | None = None
    description: str | None = None
    dependencies: tuple[PackageDependency, ...] = ()
    access: str = "public"  # "public" | "restricted" (publishing only)
    registry: PackageRegistry | None = None


class ModelCapabilities(msgspec.Struct, frozen=True):
    streaming: bool = False
    tool_calling: bool = True


class ModelPricing(msgspec.Struct, frozen=True):
    """USD per million tokens, for the cost in runtime events and `maxTurnCostUsd`."""

    input: float
    output: float


class ModelSpec(msgspec.Struct, frozen=True):
    provider: str  # "scripted" | "openai" | "anthropic" | ...
    model: str
    api_key: ValueSource | None = None
    endpoint: str | None = None
    options: dict[str, Any] = {}
    capabilities: ModelCapabilities = ModelCapabilities()
    pricing: ModelPricing | None = None
    # `apiKeys`: more keys for the same model, rotated on 429 / 401 (after `apiKey`, if set).
    api_keys: tuple[ValueSource, ...] = ()


class RefItem(msgspec.Struct, frozen=True):
    ref: ObjectRef
    config: dict[str, Any] | None = None  # per-ref config (extensions)


class AgentModelConfig(msgspec.Struct, frozen=True):
    model_ref: ObjectRef
    params: dict[str, Any] = {}  # temperature, maxTokens, topP, ... as written in YAML


class AgentPrompt(msgspec.Struct, frozen=True):
    system: str | None = None
    system_ref: str | None = None  # path relative to the bundle root


class ToolPolicySpec(msgspec.Struct, frozen=True):
    """`Agent.spec.toolPolicy`: full tool names or globs (`bash__*`); deny wins over allow.
    `allow` unset means every tool of the catalog; `allowRegistryCalls` lets the model call a
    Registry tool that the step's catalog does not offer."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    allow_registry_calls: bool = False
    # Calls to these tools wait for a human (`goondan approve` / `deny`), for at most
    # `approval_timeout_seconds` (None: one hour).
    require_approval: tuple[str, ...] = ()
    approval_timeout_seconds: float | None = None


class AgentCompaction(msgspec.Struct, frozen=True):
    """`Agent.spec.compaction`: the Model that writes the summaries of a compaction (after a
    context overflow, or for `message-compaction` in `mode: summarize`)."""

    model_ref: ObjectRef


class AgentResources(msgspec.Struct, frozen=True):
    """`Agent.spec.resources`: what a Ray-placed agent's actor reserves on its node."""

    cpus: float | None = None
    memory_mb: float | None = None
    gpus: float | None = None
    custom: dict[str, float] = {}


class AgentSpec(msgspec.Struct, frozen=True):
    model_config: AgentModelConfig
    prompt: AgentPrompt | None = None
    tools: tuple[RefItem, ...] = ()
    extensions: tuple[RefItem, ...] = ()
    required_tools: tuple[str, ...] = ()
    tool_policy: ToolPolicySpec = ToolPolicySpec()
    compaction: AgentCompaction | None = None
    # Where its process runs: "local" (a child of the orchestrator) or "ray" (an actor on a
    # Ray cluster); None: the run's `--placement`.
    placement: str | None = None
    resources: AgentResources = AgentResources()


class ShutdownPolicy(msgspec.Struct, frozen=True):
    grace_period_seconds: float = 300.0


class LifecyclePolicy(msgspec.Struct, frozen=True):
    ttl_seconds: float | None = None
    gc_grace_seconds: float | None = None


class BudgetPolicy(msgspec.Struct, frozen=True):
    """Per-turn limits (`policy.budget`); a turn that reaches one ends with finishReason
    `budget` and a message saying which. `None` switches a limit off."""

    max_turn_seconds: float | None = 1800.0
    max_turn_tokens: int | None = 1_000_000
    max_turn_cost_usd: float | None = None  # needs Model.spec.pricing


class PingPongPolicy(msgspec.Struct, frozen=True):
    """`policy.loopDetection.pingPong`: two calls alternating (A, B, A, B, same arguments),
    counted in calls; refused and stopped only while neither side's result changes."""

    enabled: bool = True
    warn_at: int = 6
    block_at: int = 8
    stop_at: int = 12


class LoopDetectionPolicy(msgspec.Struct, frozen=True):
    """`policy.loopDetection`: the same tool call (same name and arguments, same result)
    repeated in one turn warns the model at `warn_at`, is refused at `block_at` and ends the
    turn at `stop_at`."""

    enabled: bool = True
    warn_at: int = 3
    block_at: int = 5
    stop_at: int = 8
    ping_pong: PingPongPolicy = PingPongPolicy()


class SwarmPolicy(msgspec.Struct, frozen=True):
    max_steps_per_turn: int = 32
    lifecycle: LifecyclePolicy = LifecyclePolicy()
    shutdown: ShutdownPolicy = ShutdownPolicy()
    budget: BudgetPolicy = BudgetPolicy()
    loop_detection: LoopDetectionPolicy = LoopDetectionPolicy()


class SwarmSpec(msgspec.Struct, frozen=True):
    entry_agent: ObjectRef
    agents: tuple[RefItem, ...]
    instance_key: str | None = None
    policy: SwarmPolicy = SwarmPolicy()


class ToolExport(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]


class McpServerSpec(msgspec.Struct, frozen=True):
    """`Tool.spec.mcp`: an MCP server whose tools become this Tool's exports. Exactly one of
    `command` (stdio: argv of a child of the agent) and `url` (streamable HTTP) is set."""

    command: tuple[str, ...] = ()
    url: str | None = None
    env: dict[str, ValueSource] = {}  # stdio only
    headers: dict[str, ValueSource] = {}  # http only
    cwd: str | None = None  # relative to Source.root; None: the root itself
    startup_timeout_ms: int = 10_000


class ToolSpec(msgspec.Struct, frozen=True):
    entry: str | None  # relative to Source.root; None for an MCP Tool
    exports: tuple[ToolExport, ...]
    error_message_limit: int = 1000
    timeout_ms: int | None = None  # per call; None: the runtime default
    sequential: bool = False  # never runs beside another call of the same response
    mcp: McpServerSpec | None = None  # set instead of `entry` / `exports`
    include: tuple[str, ...] | None = None  # MCP: the server's tool names (globs) to offer
    exclude: tuple[str, ...] = ()


class ExtensionSpec(msgspec.Struct, frozen=True):
    entry: str
    config: dict[str, Any] = {}


class ConnectorEventSpec(msgspec.Struct, frozen=True):
    name: str
    properties: dict[str, Any] = {}


class ConnectorSpec(msgspec.Struct, frozen=True):
    entry: str
    events: tuple[ConnectorEventSpec, ...] = ()


class IngressRoute(msgspec.Struct, frozen=True):
    agent_ref: ObjectRef | None = None
    instance_key: str | None = None
    instance_key_property: str | None = None
    instance_key_prefix: str | None = None


class IngressMatch(msgspec.Struct, frozen=True):
    event: str | None = None
    properties: dict[str, str | int | float | bool] = {}


class IngressRule(msgspec.Struct, frozen=True):
    match: IngressMatch = IngressMatch()
    route: IngressRoute = IngressRoute()


class ConnectionSpec(msgspec.Struct, frozen=True):
    connector_ref: ObjectRef
    swarm_ref: ObjectRef | None = None
    config: dict[str, ValueSource] = {}
    secrets: dict[str, ValueSource] = {}
    ingress_rules: tuple[IngressRule, ...] = ()
    tool_policy: ToolPolicySpec | None = None  # narrows the agents' policy for its turns


Spec = (
    PackageSpec
    | ModelSpec
    | AgentSpec
    | SwarmSpec
    | ToolSpec
    | ExtensionSpec
    | ConnectorSpec
    | ConnectionSpec
)


class Resource(msgspec.Struct, frozen=True):
    """One loaded resource. `package` is its scope: a package name, or `LOCAL_SCOPE`."""

    kind: str
    metadata: Metadata
    spec: Any  # the Spec Struct matching `kind`
    package: str
    source: Source

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.metadata.name}"

    def entry_path(self) -> Path:
        """Absolute path of `spec.entry` for Tool/Extension/Connector resources."""
        entry: str = self.spec.entry
        return (self.source.root / entry).resolve()
