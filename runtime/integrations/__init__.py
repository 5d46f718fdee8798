"""codecoder where agent frameworks ask for approval: one module per framework, each imported
only by an application that uses it (its framework is an optional dependency: `pip install
'codecoder-runtime[pydantic-ai]'`, `[openai-agents]`, `[claude-agent-sdk]`).

    codecoder.integrations.pydantic_ai       toolset(session): a pydantic-ai toolset; a call
                                             that needs a question is a deferred approval
    codecoder.integrations.openai_agents     tools(session): the Agents SDK's FunctionTools,
                                             `needs_approval` being codecoder's decision
    codecoder.integrations.claude_agent_sdk  the Claude Agent SDK's `can_use_tool` and hooks,
                                             for its built-in tools, its shell contained

Every call goes through the session as any call does (the same chain, the same environments,
the same audit log and OpenTelemetry span); the adapters only carry the decision, the question
and the human's answer between codecoder and the framework.
"""
