"""The `codecoder` command: the commands the warm decision server runs (decide, hook, call,
exec, replay, key, tools, check: `interfaces.forkserver.protocol.SERVED`) are run there when it
can; everything else (and every fallback) by `runtime.interfaces.cli` in this process. Only the
standard library is imported before that choice. A shell completing a command line (argcomplete
sets `_ARGCOMPLETE`) is answered from the grammar alone (`cli.grammar.complete`)."""

import os
import sys


def main() -> int:
    if "_ARGCOMPLETE" in os.environ:
        from codecoder.interfaces.cli.grammar import complete

        return complete()
    argv = sys.argv[1:]
    from codecoder.interfaces.forkserver.protocol import answer

    code = answer(argv)
    if code is not None:
        # Served: this process holds nothing to finalise (only the standard library and the
        # client were imported), and the interpreter's teardown costs ~7 ms a command.
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass  # nothing could be written there: nothing is lost by not writing it
        os._exit(code & 0xFF)
    from codecoder.interfaces.cli import main as run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
