"""`python -m agentproc`: one AgentProcess, started by the orchestrator."""

from agentproc.main import main

raise SystemExit(main())
