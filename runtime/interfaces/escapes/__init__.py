"""`codecoder audit`: the sandbox escape-attempt suite, run against a project's own configuration.

The corpus is data, one JSON file per layer in `sandboxes/escapes/` (its README describes the
fields); this package carries the attempts out and reports what it *observed* for each:

    keying            run_command through a session holding a grant for an innocent command
                      (checked first to really allow it): the attack must not be allowed, and
                      nothing may reach the environment (a recorder that runs nothing)
    permission-files  hand-edited entries above their ceiling, protected paths answered beyond
                      Once, sandboxed tools writing codecoder.json, .codecoder/ or .git/
    wasm              probe.wasm (sandboxes/escapes/probe.c) attacking WASI from inside, a
                      symlink swapped during a call, a tampered compiled-module cache, file tools,
                      modules built to exhaust memory, tables or the compiler, FIFOs, the disk,
                      protected paths planted at any depth
    bwrap             scripts attacking the @bwrap sandbox from inside: the workspace's protected
                      paths, the user's secrets and the runtime's state, the host's network,
                      sockets and processes, mounts, namespaces, keyrings, the terminal,
                      privileges, processes outliving their call (bait served on the host)
    docker            scripts attacking the container from inside: network (a canary served on
                      the host), filesystems, privileges, resources, time, the agent that runs
                      them, processes outliving their call, state left for another grant

Each attempt ends blocked, escaped, not run or not applicable (outcomes.py says what each means).

    runner.py            run_audit, the layer registry, what the layers share, one attempt
    corpus.py            the corpus files read into validated entries and attempts
    report.py            the results: counts, JSON, JUnit XML, the table
    outcomes.py          the four states and the exceptions a layer ends an attempt with
    options.py           AuditOptions: parts of the configuration replaced (to weaken it)
    layer.py             a layer's runner, and what it may use of the audit
    keying.py            the keying layer
    permission_files.py  the permission-files layer
    wasm.py              the wasm layer
    bwrap.py             the bwrap layer
    docker.py            the docker layer
    calls.py             recording environments, a fixed-answer asker, a call's outcome in words
    workspace.py         the scratch workspace: bait, protected paths, snapshots, restoring
    canary.py            the TCP service on the host the docker layer must not reach
    probe.py             probe.wasm's bytes
"""
