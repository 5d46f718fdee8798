"""@docker: commands in a hardened container of any image, through an agent inside it.

`environment` is the environment (warm containers, calls, modes); `engine` reaches the Docker
engine, `labels` marks what it creates, `containers` makes, hardens, checks and removes them,
`channel` is the authenticated stream to the agent and `calls` one call in its terms;
`settings` holds the hardened defaults and what loosens them, `image` builds sandbox images,
`egress` is the CONNECT proxy of the network allowlist, `sync` the workspace as a volume for a
remote engine, `cgroups` the limits read on the host (gVisor)."""
