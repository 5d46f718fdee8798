"""tar's and unzip's forms: extracting writes the files the archive names, not the arguments (an
archive can hold .git/hooks/…), so only listing and testing an archive is simple; options that run
a program or write outside the directory are compound.
"""

from __future__ import annotations

from collections.abc import Sequence

from codecoder.permissions.programs.form import Form
from codecoder.permissions.programs.options import has_option

_TAR_RUNS = (
    *("--to-command", "--use-compress-program", "--checkpoint-action", "--info-script"),
    *("--new-volume-script", "--rsh-command", "--rmt-command", "--absolute-names", "-I"),
    *("-F", "-P"),
)


def _tar(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command, extracting only below its directory"
    words = list(args)
    if words and not words[0].startswith("-"):
        words[0] = "-" + words[0]  # `tar xzf a.tar`: the first word is a bundle of options
    found = has_option(words, _TAR_RUNS, "fCTXbgHKLNVK")
    if found is not None:
        return Form(f"{program} {found}: runs a program or writes outside its directory")
    found = has_option(words, ("-x", "--extract", "--get"), "fCTXbgHKLNVK")
    if found is not None:
        return Form(
            f"{program} {found}: extracts files the archive names, not the arguments (an "
            "archive can hold .git/hooks/…)"
        )
    if "--force-local" not in args and any(":" in word for word in args):
        return Form(f"{program}: an archive name with a colon is reached through rsh or ssh")
    return Form(None, (), covers)


def _unzip(program: str, args: Sequence[str], search_path: str) -> Form:
    covers = f"every simple `{program} …` command that lists or tests an archive"
    if has_option(args, ("-l", "-t", "-v", "-Z", "-z", "-p"), "dxP") is None:
        return Form(
            f"{program}: extracts files the archive names, not the arguments (an archive can "
            "hold .git/hooks/…)"
        )
    if has_option(args, ("-:",), "dxP") is not None:
        return Form(f"{program} -:: writes outside its directory")
    return Form(None, (), covers)
