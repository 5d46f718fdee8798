"""`codecoder bench`: the benchmarks (`python -m codecoder.benchmarks`) from the installed package.

The benchmarks measure every layer of the runtime, the command line included, so they sit above
it in the layers: this command runs them as their own program in this process (the way
`python -m` would), with the arguments after `bench`, rather than importing them.
"""

from __future__ import annotations

import argparse
import runpy
import sys


def bench(args: argparse.Namespace) -> int:
    argv = sys.argv
    sys.argv = ["codecoder bench", *args.passed_on]
    try:
        runpy.run_module("codecoder.benchmarks", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
    return 0
