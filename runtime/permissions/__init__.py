"""The permission model (SPEC §4, §5, §8): what a call asks for (`keys`), what a command's key
is (`commandkey`, with the program table `programs`), what an allowlist entry or a deny rule
covers (`patterns`), the two allowlists (`allowlist`), the lookup chain that decides
(`engine`), and the question put to the human (`prompt`)."""
