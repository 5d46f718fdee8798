"""How people and programs reach the runtime: the `codecoder` command line (`cli`), the warm
decision server behind it (`forkserver`, a fork server), the interactive session
(`interactive`), the MCP server (`mcp_server`), the escape-attempt suite (`escapes`, `codecoder
audit`), the permission hooks of Claude Code and Gemini CLI (`hooks`), and tool
definitions for LLM APIs (`schemas`). Ctrl-C and SIGTERM end a command the same way
(`interruption`)."""
