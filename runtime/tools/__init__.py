"""The tools, by category (SPEC §3): `base` is what a tool is, `catalogue` the 26 built in.

files (read, write, run_wasm), execute (run_command, run_container, commit), git (the read
tools), web, agent (agent, reason, todo, memory, with `drivers` for the child's model),
capability (self-authored tools), and `network`, the permission of a sandbox's connections.
"""
