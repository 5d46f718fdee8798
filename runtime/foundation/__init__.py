"""The foundation every other package of codecoder stands on, `codecoder.environments`
included: the exception tree (`errors`), the environment tags and their ceilings (`ceiling`),
the decision value (`decision`), protected paths (`protected`), reads beneath a directory
(`openbeneath`), the state and configuration directories (`state`), atomic file replacement
(`atomicfile`), what a person is shown (`display`), and the address rules shared by the web
tools and the egress proxy (`hosts`). It imports nothing of codecoder above it."""
