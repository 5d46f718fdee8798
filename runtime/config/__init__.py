"""Configuration and trust: codecoder.json and the user's own file, read with line and column
(`jsonsource`, `schema`, `reading`), written under a lock without losing anything (`writing`),
what a file says (`projectfile`) and means (`settings`, `entrychecks`), how far an untrusted one
is obeyed (`untrusted`, `trust`), the two layered (`project`), and the project's capabilities
(`capabilities`)."""
