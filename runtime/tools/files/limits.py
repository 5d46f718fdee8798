"""How much the file tools read, list and show at most: the sizes and counts they stop at.

The code reads them through this module (`limits.GREP_MAX_FILE_BYTES`) when it runs, so a test
that lowers one lowers it for every module of the file tools at once (parameter defaults
excepted: those are fixed when their module is loaded).
"""

from __future__ import annotations

MAX_READ_BYTES = 16 * 1024 * 1024  # read_file, diff and edit_file read at most this much
MAX_MODULE_BYTES = 64 * 1024 * 1024
GREP_MAX_FILE_BYTES = 4 * 1024 * 1024  # grep skips bigger files, and says so
CAT_BATCH_BYTES = 32 * 1024 * 1024  # bytes of file content per fileops call in grep
WALK_MAX_ENTRIES = 500_000
SEARCH_MAX_OUTPUT = 64 * 1024 * 1024  # bytes of ripgrep output read; past it, a search stops
LISTING_MAX_OUTPUT = 256 * 1024 * 1024
BINARY_SNIFF_BYTES = 8000  # git's heuristic: a NUL in the first 8000 bytes means binary
MAX_LINE_CHARS = 2000
