"""Goondan bundles: load `goondan.yaml` (+ resource files), validate, and look resources up.

bundle = load_bundle("configs/quickstart")      # raises BundleInvalid(errors)
swarm = bundle.select_swarm(None)
problems = probe_entries(bundle)               # import the Python entries in a child process
"""

from goondan.bundle.bundle import Bundle
from goondan.bundle.errors import BundleInvalid, ConfigError
from goondan.bundle.loader import load_bundle
from goondan.bundle.model import (
    KINDS,
    LOCAL_SCOPE,
    AgentModelConfig,
    AgentPrompt,
    AgentSpec,
    ConnectionSpec,
    ConnectorEventSpec,
    ConnectorSpec,
    ExtensionSpec,
    IngressMatch,
    IngressRoute,
    IngressRule,
    LifecyclePolicy,
    McpServerSpec,
    Metadata,
    ModelCapabilities,
    ModelSpec,
    ObjectRef,
    PackageDependency,
    PackageRegistry,
    PackageSpec,
    RefItem,
    Resource,
    SecretRef,
    ShutdownPolicy,
    Source,
    SwarmPolicy,
    SwarmSpec,
    ToolExport,
    ToolSpec,
    ValueSource,
)
from goondan.bundle.probe import DEFAULT_TIMEOUT_S as PROBE_TIMEOUT_S
from goondan.bundle.probe import bundle_entries, probe_entries, probe_entries_async
from goondan.bundle.refs import parse_ref
from goondan.bundle.values import resolve_value

__all__ = [
    "KINDS",
    "LOCAL_SCOPE",
    "AgentModelConfig",
    "AgentPrompt",
    "AgentSpec",
    "Bundle",
    "BundleInvalid",
    "ConfigError",
    "ConnectionSpec",
    "ConnectorEventSpec",
    "ConnectorSpec",
    "ExtensionSpec",
    "IngressMatch",
    "IngressRoute",
    "IngressRule",
    "LifecyclePolicy",
    "Metadata",
    "ModelCapabilities",
    "ModelSpec",
    "ObjectRef",
    "PROBE_TIMEOUT_S",
    "PackageDependency",
    "PackageRegistry",
    "PackageSpec",
    "RefItem",
    "Resource",
    "SecretRef",
    "ShutdownPolicy",
    "Source",
    "SwarmPolicy",
    "SwarmSpec",
    "McpServerSpec",
    "ToolExport",
    "ToolSpec",
    "ValueSource",
    "bundle_entries",
    "load_bundle",
    "parse_ref",
    "probe_entries",
    "probe_entries_async",
    "resolve_value",
]
