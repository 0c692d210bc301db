"""Spec parsers for the kinds that describe who runs: Package, Model, Agent, Swarm."""

from __future__ import annotations

import re
from typing import Any

from goondan.bundle.fields import Checker
from goondan.bundle.files import check_text_file
from goondan.bundle.located import YPath
from goondan.bundle.model import (
    AgentCompaction,
    AgentModelConfig,
    AgentPrompt,
    AgentResources,
    AgentSpec,
    BudgetPolicy,
    LifecyclePolicy,
    LoopDetectionPolicy,
    ModelCapabilities,
    ModelPricing,
    ModelSpec,
    PackageDependency,
    PackageRegistry,
    PackageSpec,
    PingPongPolicy,
    RefItem,
    ShutdownPolicy,
    SwarmPolicy,
    SwarmSpec,
    ToolPolicySpec,
    ValueSource,
)
from goondan.bundle.names import LLM_TOOL_NAME
from goondan.bundle.suggest import closest

PROVIDERS = ("scripted", "openai", "anthropic", "google")
# A tool name, or an fnmatch glob of one (`bash__*`, `*__send`).
TOOL_GLOB = re.compile(r"^[a-zA-Z0-9_*?!\[\]-]{1,64}$")
SPEC = ("spec",)


def parse_package(chk: Checker, spec: Any, name: str | None) -> PackageSpec | None:
    allowed = ("version", "description", "access", "dependencies", "registry")
    data = chk.mapping(SPEC, {} if spec is None else spec, allowed)
    if data is None:
        return None
    mark = chk.mark()
    version = chk.optional_string(data, SPEC, "version")
    description = chk.optional_string(data, SPEC, "description")
    access = data.get("access") or "public"
    if access not in ("public", "restricted"):
        chk.error((*SPEC, "access"), f"must be 'public' or 'restricted', got '{access}'")
    deps: list[PackageDependency] = []
    dep_list = data.get("dependencies")
    dep_items = chk.sequence((*SPEC, "dependencies"), dep_list) if dep_list is not None else []
    for i, item in enumerate(dep_items or []):
        path = (*SPEC, "dependencies", i)
        dep = chk.mapping(path, item, ("name", "version"), ("name", "version"))
        if dep is None:
            continue
        dep_name = chk.string((*path, "name"), dep.get("name")) if "name" in dep else None
        dep_version = (
            chk.string((*path, "version"), dep.get("version")) if "version" in dep else None
        )
        if dep_name and dep_version:
            deps.append(PackageDependency(name=dep_name, version=dep_version))
    registry = None
    if data.get("registry") is not None:
        reg = chk.mapping((*SPEC, "registry"), data["registry"], ("url",), ("url",))
        url = chk.optional_string(reg or {}, (*SPEC, "registry"), "url")
        registry = PackageRegistry(url=url) if url else None
    if not chk.clean_since(mark):
        return None
    return PackageSpec(
        version=version,
        description=description,
        dependencies=tuple(deps),
        access=access,
        registry=registry,
    )


def parse_model(chk: Checker, spec: Any, name: str | None) -> ModelSpec | None:
    allowed = (
        "provider",
        "model",
        "apiKey",
        "apiKeys",
        "endpoint",
        "options",
        "capabilities",
        "pricing",
    )
    data = chk.mapping(SPEC, spec, allowed, ("provider", "model"))
    if data is None:
        return None
    mark = chk.mark()
    provider = chk.optional_string(data, SPEC, "provider")
    if provider is not None and provider not in PROVIDERS:
        hit = closest(provider, PROVIDERS)
        chk.error(
            (*SPEC, "provider"),
            f"unknown model provider '{provider}'; supported: {', '.join(PROVIDERS)}",
            f"did you mean '{hit}'?"
            if hit
            else "use 'openai' for any OpenAI-compatible "
            "server (vLLM, Ollama, OpenRouter) with 'endpoint', or 'scripted' offline",
        )
    model = chk.optional_string(data, SPEC, "model")
    api_key = None
    if data.get("apiKey") is not None:
        api_key = chk.value_source((*SPEC, "apiKey"), data["apiKey"])
    api_keys: list[ValueSource] = []
    if data.get("apiKeys") is not None:
        items = chk.sequence((*SPEC, "apiKeys"), data["apiKeys"], min_items=1) or []
        for index, item in enumerate(items):
            source = chk.value_source((*SPEC, "apiKeys", index), item)
            if source is not None:
                api_keys.append(source)
    endpoint = chk.optional_string(data, SPEC, "endpoint")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        chk.error(
            (*SPEC, "endpoint"),
            f"must be an http(s) URL, got '{endpoint}'",
            "e.g. http://localhost:11434/v1",
        )
    options: dict[str, Any] = {}
    if data.get("options") is not None:
        options = chk.mapping((*SPEC, "options"), data["options"], (), open_keys=True) or {}
    capabilities = _capabilities(chk, data.get("capabilities"))
    pricing = _pricing(chk, data.get("pricing"))
    if not chk.clean_since(mark) or provider is None or model is None:
        return None
    return ModelSpec(
        provider=provider,
        model=model,
        api_key=api_key,
        api_keys=tuple(api_keys),
        endpoint=endpoint,
        options=options,
        capabilities=capabilities,
        pricing=pricing,
    )


def _pricing(chk: Checker, value: Any) -> ModelPricing | None:
    """`pricing: {input: 2.5, output: 10}`: USD per million tokens."""
    if value is None:
        return None
    path = (*SPEC, "pricing")
    data = chk.mapping(path, value, ("input", "output"), ("input", "output"))
    if data is None or data.get("input") is None or data.get("output") is None:
        return None
    price_in = chk.number((*path, "input"), data["input"], low=0)
    price_out = chk.number((*path, "output"), data["output"], low=0)
    if price_in is None or price_out is None:
        return None
    return ModelPricing(input=price_in, output=price_out)


def _capabilities(chk: Checker, value: Any) -> ModelCapabilities:
    if value is None:
        return ModelCapabilities()
    path = (*SPEC, "capabilities")
    data = chk.mapping(path, value, (), open_keys=True) or {}
    known = ("streaming", "toolCalling")
    for key, flag in data.items():
        chk.boolean((*path, key), flag)
        hit = closest(key, known)
        if key not in known and hit:  # extra flags are allowed, near-misses of ours are typos
            chk.error((*path, key), f"unknown capability '{key}'", f"did you mean '{hit}'?")
    streaming, tool_calling = data.get("streaming", False), data.get("toolCalling", True)
    return ModelCapabilities(streaming=streaming is True, tool_calling=tool_calling is not False)


def parse_agent(chk: Checker, spec: Any, name: str | None) -> AgentSpec | None:
    allowed = (
        "modelConfig",
        "prompt",
        "tools",
        "extensions",
        "requiredTools",
        "toolPolicy",
        "compaction",
        "placement",
        "resources",
    )
    data = chk.mapping(SPEC, spec, allowed, ("modelConfig",))
    if data is None:
        return None
    mark = chk.mark()
    model_config = _model_config(chk, data.get("modelConfig"))
    prompt = _prompt(chk, data.get("prompt"))
    tools = ref_items(chk, (*SPEC, "tools"), data.get("tools"), "Tool", with_config=False)
    extensions = ref_items(
        chk, (*SPEC, "extensions"), data.get("extensions"), "Extension", with_config=True
    )
    required: list[str] = []
    if data.get("requiredTools") is not None:
        for i, item in enumerate(
            chk.sequence((*SPEC, "requiredTools"), data["requiredTools"]) or []
        ):
            path = (*SPEC, "requiredTools", i)
            tool = chk.string(path, item, what="a tool name such as 'slack__send'")
            if tool is not None and not LLM_TOOL_NAME.match(tool):
                chk.error(
                    path,
                    f"'{tool}' is not a tool name an LLM can call",
                    "write the full '{tool}__{export}' name, e.g. 'slack__send'",
                )
            elif tool is not None:
                required.append(tool)
    tool_policy = parse_tool_policy(chk, data.get("toolPolicy"), SPEC)
    compaction = _compaction(chk, data.get("compaction"))
    placement = _placement(chk, data.get("placement"))
    resources = _resources(chk, data.get("resources"))
    if not chk.clean_since(mark) or model_config is None:
        return None
    return AgentSpec(
        model_config=model_config,
        prompt=prompt,
        tools=tools,
        extensions=extensions,
        required_tools=tuple(required),
        tool_policy=tool_policy,
        compaction=compaction,
        placement=placement,
        resources=resources,
    )


PLACEMENTS = ("local", "ray")


def _placement(chk: Checker, value: Any) -> str | None:
    """`placement: local | ray` (absent: the run's `--placement`)."""
    if value is None:
        return None
    if value not in PLACEMENTS:
        hit = closest(str(value), PLACEMENTS)
        chk.error(
            (*SPEC, "placement"),
            f"must be one of {', '.join(PLACEMENTS)}, got {value!r}",
            f"did you mean '{hit}'?" if hit else "write 'local' or 'ray'",
        )
        return None
    return str(value)


def _resources(chk: Checker, value: Any) -> AgentResources:
    """`resources: {cpus, memoryMB, gpus, custom: {name: amount}}`: what the agent's Ray actor
    reserves (amounts >= 0)."""
    if value is None:
        return AgentResources()
    path = (*SPEC, "resources")
    data = chk.mapping(path, value, ("cpus", "memoryMB", "gpus", "custom")) or {}
    amounts: dict[str, float | None] = {}
    for key in ("cpus", "memoryMB", "gpus"):
        if data.get(key) is not None:
            amounts[key] = chk.number((*path, key), data[key], low=0)
    custom: dict[str, float] = {}
    if data.get("custom") is not None:
        raw = data["custom"]
        if not isinstance(raw, dict):
            chk.error((*path, "custom"), "must be a mapping of resource name to amount")
        else:
            for name, amount in raw.items():
                item = (*path, "custom", name)
                if not isinstance(name, str) or not name:
                    chk.error(item, "a resource name must be a non-empty string")
                    continue
                number = chk.number(item, amount, low=0)
                if number is not None:
                    custom[name] = number
    return AgentResources(
        cpus=amounts.get("cpus"),
        memory_mb=amounts.get("memoryMB"),
        gpus=amounts.get("gpus"),
        custom=custom,
    )


def _compaction(chk: Checker, value: Any) -> AgentCompaction | None:
    """`compaction: {modelRef: Model/x}`: who writes the summaries (default: the agent's
    own model)."""
    if value is None:
        return None
    path = (*SPEC, "compaction")
    data = chk.mapping(path, value, ("modelRef",), ("modelRef",))
    if not data or data.get("modelRef") is None:
        return None
    ref = chk.ref((*path, "modelRef"), data["modelRef"], "Model")
    return AgentCompaction(model_ref=ref) if ref is not None else None


def parse_tool_policy(chk: Checker, value: Any, spec_path: YPath) -> ToolPolicySpec:
    """`toolPolicy: {allow: [...], deny: [...], allowRegistryCalls: false, requireApproval:
    [...], approvalTimeoutSeconds: 3600}` (names or globs); on an Agent, and on a Connection
    (for the turns it starts)."""
    if value is None:
        return ToolPolicySpec()
    path = (*spec_path, "toolPolicy")
    data = (
        chk.mapping(
            path,
            value,
            ("allow", "deny", "allowRegistryCalls", "requireApproval", "approvalTimeoutSeconds"),
        )
        or {}
    )
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("allow", "deny", "requireApproval"):
        if data.get(key) is None:
            continue
        names: list[str] = []
        for i, item in enumerate(chk.sequence((*path, key), data[key]) or []):
            pattern = chk.string((*path, key, i), item, what="a tool name or glob like 'bash__*'")
            if pattern is not None and not TOOL_GLOB.match(pattern):
                chk.error(
                    (*path, key, i),
                    f"'{pattern}' cannot match a tool name",
                    "write a full '{tool}__{export}' name, or a glob of one such as 'bash__*'",
                )
            elif pattern is not None:
                names.append(pattern)
        lists[key] = tuple(names)
    registry_calls = None
    if data.get("allowRegistryCalls") is not None:
        registry_calls = chk.boolean((*path, "allowRegistryCalls"), data["allowRegistryCalls"])
    timeout = None
    if data.get("approvalTimeoutSeconds") is not None:
        timeout = chk.number(
            (*path, "approvalTimeoutSeconds"),
            data["approvalTimeoutSeconds"],
            low=0,
            strict_low=True,
        )
    return ToolPolicySpec(
        allow=lists.get("allow"),
        deny=lists.get("deny", ()),
        allow_registry_calls=registry_calls is True,
        require_approval=lists.get("requireApproval", ()),
        approval_timeout_seconds=timeout,
    )


def _model_config(chk: Checker, value: Any) -> AgentModelConfig | None:
    path = (*SPEC, "modelConfig")
    if value is None:
        return None  # reported as missing by the spec mapping check
    data = chk.mapping(path, value, ("modelRef", "params"), ("modelRef",))
    if data is None:
        return None
    model_ref = None
    if data.get("modelRef") is not None:
        model_ref = chk.ref((*path, "modelRef"), data["modelRef"], "Model")
    params: dict[str, Any] = {}
    if data.get("params") is not None:
        params = chk.mapping((*path, "params"), data["params"], (), open_keys=True) or {}
        ppath = (*path, "params")
        if "temperature" in params:
            chk.number((*ppath, "temperature"), params["temperature"], low=0, high=2)
        if "topP" in params:
            chk.number((*ppath, "topP"), params["topP"], low=0, high=1)
        if "maxTokens" in params:
            chk.integer((*ppath, "maxTokens"), params["maxTokens"], minimum=1)
    return AgentModelConfig(model_ref=model_ref, params=params) if model_ref else None


def _prompt(chk: Checker, value: Any) -> AgentPrompt | None:
    if value is None:
        return None
    path = (*SPEC, "prompt")
    data = chk.mapping(path, value, ("system", "systemRef"))
    if data is None:
        return None
    if data.get("system") is not None and data.get("systemRef") is not None:
        chk.error(
            path,
            "'system' and 'systemRef' are mutually exclusive",
            "keep the inline 'system' text or the 'systemRef' file, not both",
        )
        return None
    system = chk.optional_string(data, path, "system")
    system_ref = chk.optional_string(data, path, "systemRef")
    if system_ref is not None:
        check_text_file(chk, (*path, "systemRef"), system_ref, chk.root, what="prompt file")
    return AgentPrompt(system=system, system_ref=system_ref)


def parse_swarm(chk: Checker, spec: Any, name: str | None) -> SwarmSpec | None:
    allowed = ("entryAgent", "agents", "instanceKey", "policy")
    data = chk.mapping(SPEC, spec, allowed, ("entryAgent", "agents"))
    if data is None:
        return None
    mark = chk.mark()
    entry = None
    if data.get("entryAgent") is not None:
        entry = chk.ref((*SPEC, "entryAgent"), data["entryAgent"], "Agent")
    agents: tuple[RefItem, ...] = ()
    if data.get("agents") is not None:
        agents = ref_items(
            chk, (*SPEC, "agents"), data["agents"], "Agent", with_config=False, min_items=1
        )
    instance_key = chk.optional_string(data, SPEC, "instanceKey")
    policy = _policy(chk, data.get("policy"))
    if not chk.clean_since(mark) or entry is None:
        return None
    return SwarmSpec(entry_agent=entry, agents=agents, instance_key=instance_key, policy=policy)


def _policy(chk: Checker, value: Any) -> SwarmPolicy:
    if value is None:
        return SwarmPolicy()
    path = (*SPEC, "policy")
    allowed = ("maxStepsPerTurn", "lifecycle", "shutdown", "budget", "loopDetection")
    data = chk.mapping(path, value, allowed) or {}
    steps = SwarmPolicy().max_steps_per_turn
    if data.get("maxStepsPerTurn") is not None:
        steps = chk.integer((*path, "maxStepsPerTurn"), data["maxStepsPerTurn"], minimum=1) or steps
    lifecycle = LifecyclePolicy()
    if data.get("lifecycle") is not None:
        lpath = (*path, "lifecycle")
        life = chk.mapping(lpath, data["lifecycle"], ("ttlSeconds", "gcGraceSeconds")) or {}
        lifecycle = LifecyclePolicy(
            ttl_seconds=_opt_seconds(chk, life, lpath, "ttlSeconds", strict=True),
            gc_grace_seconds=_opt_seconds(chk, life, lpath, "gcGraceSeconds", strict=False),
        )
    shutdown = ShutdownPolicy()
    if data.get("shutdown") is not None:
        spath = (*path, "shutdown")
        down = chk.mapping(spath, data["shutdown"], ("gracePeriodSeconds",)) or {}
        grace = _opt_seconds(chk, down, spath, "gracePeriodSeconds", strict=False)
        shutdown = ShutdownPolicy() if grace is None else ShutdownPolicy(grace_period_seconds=grace)
    return SwarmPolicy(
        max_steps_per_turn=steps,
        lifecycle=lifecycle,
        shutdown=shutdown,
        budget=_budget(chk, (*path, "budget"), data.get("budget")),
        loop_detection=_loop_detection(chk, (*path, "loopDetection"), data.get("loopDetection")),
    )


def _budget(chk: Checker, path: tuple[str | int, ...], value: Any) -> BudgetPolicy:
    """`budget: {maxTurnSeconds, maxTurnTokens, maxTurnCostUsd}`; `null` switches one off."""
    default = BudgetPolicy()
    if value is None:
        return default
    keys = ("maxTurnSeconds", "maxTurnTokens", "maxTurnCostUsd")
    data = chk.mapping(path, value, keys) or {}
    seconds, tokens, cost = default.max_turn_seconds, default.max_turn_tokens, None
    if "maxTurnSeconds" in data:
        raw = data["maxTurnSeconds"]
        seconds = None if raw is None else chk.number((*path, keys[0]), raw, low=0, strict_low=True)
    if "maxTurnTokens" in data:
        raw = data["maxTurnTokens"]
        tokens = None if raw is None else chk.integer((*path, keys[1]), raw, minimum=1)
    if data.get("maxTurnCostUsd") is not None:
        cost = chk.number((*path, keys[2]), data["maxTurnCostUsd"], low=0, strict_low=True)
    return BudgetPolicy(max_turn_seconds=seconds, max_turn_tokens=tokens, max_turn_cost_usd=cost)


def _loop_detection(chk: Checker, path: tuple[str | int, ...], value: Any) -> LoopDetectionPolicy:
    """`loopDetection: {enabled, warnAt, blockAt, stopAt, pingPong}` with
    warnAt <= blockAt <= stopAt."""
    default = LoopDetectionPolicy()
    if value is None:
        return default
    keys = ("enabled", "warnAt", "blockAt", "stopAt", "pingPong")
    data = chk.mapping(path, value, keys) or {}
    enabled, counts = _thresholds(chk, path, data, default)
    ping_pong = default.ping_pong
    if data.get("pingPong") is not None:
        pp_path = (*path, "pingPong")
        pp = chk.mapping(pp_path, data["pingPong"], keys[:4]) or {}
        pp_enabled, pp_counts = _thresholds(chk, pp_path, pp, ping_pong)
        ping_pong = PingPongPolicy(pp_enabled, *pp_counts)
    return LoopDetectionPolicy(enabled, *counts, ping_pong=ping_pong)


def _thresholds(
    chk: Checker,
    path: tuple[str | int, ...],
    data: dict[str, Any],
    default: LoopDetectionPolicy | PingPongPolicy,
) -> tuple[bool, tuple[int, int, int]]:
    """`enabled` and the ordered `warnAt`, `blockAt`, `stopAt` of a detector."""
    enabled = default.enabled
    if data.get("enabled") is not None:
        enabled = chk.boolean((*path, "enabled"), data["enabled"]) is not False
    counts = {"warnAt": default.warn_at, "blockAt": default.block_at, "stopAt": default.stop_at}
    for key in counts:
        if data.get(key) is not None:
            counts[key] = chk.integer((*path, key), data[key], minimum=2) or counts[key]
    if not counts["warnAt"] <= counts["blockAt"] <= counts["stopAt"]:
        chk.error(
            path,
            f"needs warnAt <= blockAt <= stopAt, got {counts['warnAt']}, "
            f"{counts['blockAt']}, {counts['stopAt']}",
            "order the three thresholds",
        )
    return enabled, (counts["warnAt"], counts["blockAt"], counts["stopAt"])


# -- shared helpers ------------------------------------------------------------------------------


def ref_items(
    chk: Checker,
    path: tuple[str | int, ...],
    value: Any,
    kind: str,
    *,
    with_config: bool,
    min_items: int = 0,
) -> tuple[RefItem, ...]:
    """`[{ref: ...}]` (plus `config` for extensions); a bare ObjectRefLike item is accepted too."""
    if value is None:
        return ()
    items = chk.sequence(path, value, min_items)
    out: list[RefItem] = []
    seen: set[tuple[str, str, str | None]] = set()
    allowed = ("ref", "config") if with_config else ("ref",)
    for i, item in enumerate(items or []):
        ipath = (*path, i)
        config = None
        if isinstance(item, dict) and ("ref" in item or not {"kind", "name"} & item.keys()):
            chk.mapping(ipath, item, allowed, ("ref",))
            if item.get("ref") is None:
                continue
            ref = chk.ref((*ipath, "ref"), item["ref"], kind)
            if with_config and item.get("config") is not None:
                config = chk.mapping((*ipath, "config"), item["config"], (), open_keys=True)
        else:
            ref = chk.ref(ipath, item, kind)
        if ref is None:
            continue
        key = (ref.kind, ref.name, ref.package)
        if key in seen:
            chk.error(ipath, f"{ref} is listed twice", "remove the duplicate")
            continue
        seen.add(key)
        out.append(RefItem(ref=ref, config=config))
    return tuple(out)


def _opt_seconds(
    chk: Checker, data: dict[str, Any], path: tuple[str | int, ...], key: str, *, strict: bool
) -> float | None:
    value = data.get(key)
    return None if value is None else chk.number((*path, key), value, low=0, strict_low=strict)
