"""How people and programs reach the runtime: the `codecoder` command line (`cli`), the warm
decision server behind it (`decisiond`), the interactive session (`interactive`), the MCP server
(`mcp_server`), the permission hooks of Claude Code and Gemini CLI (`hooks`), and tool
definitions for LLM APIs (`schemas`). Ctrl-C and SIGTERM end a command the same way
(`interruption`)."""
