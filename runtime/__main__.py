"""The `codecoder` command: `decide` and `hook` are answered by the warm decision server when
one can (`runtime.decisiond`), everything else (and every fallback) by `runtime.cli` in this
process. Only the standard library is imported before that choice."""

import sys


def main() -> int:
    argv = sys.argv[1:]
    from runtime.decisiond import answer

    code = answer(argv)
    if code is not None:
        return code
    from runtime.cli import main as run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
