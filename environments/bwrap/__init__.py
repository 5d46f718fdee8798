"""Commands contained by the kernel: @bwrap (bubblewrap's namespaces, Landlock and seccomp), and
@confined (Landlock and seccomp alone) where bubblewrap cannot create namespaces.

    probe.py        which of them this machine offers, and why (`command_sandbox`)
    plan.py         one call's bubblewrap command line: namespaces and mounts
    home.py         what the sandbox shows of the home (toolchains) and hides (credentials,
                    other homes, /run, the runtime's directories, host secrets)
    protection.py   the workspace's protected paths bound read-only, and what a call planted
    environ.py      the environment variables without their secrets
    settings.py     `"bwrap": {"home": [...], "env": [...]}` of a trusted codecoder.json
    helper.py       the static confine helper (sandboxes/bwrap/confine.c) that applies Landlock
                    and seccomp just before the command runs
    environment.py  BwrapEnvironment (@bwrap)
    confined.py     ConfinedEnvironment (@confined)
"""
