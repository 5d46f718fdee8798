"""Read-only forms (SPEC §5): which commands only read, and which may filter another's output.

A command the table knows to be **read-only in its form** (`ls -la`, `cat f`, `head -20 f`,
`grep -rn foo src`, `sed -n '1,5p' f`, `git status`, `git log --oneline -5`) needs no question
when it runs confined read-only (in @bwrap with the whole file system read-only, the user's
secrets hidden and no network): the kernel then enforces what the table claims, so a wrong
entry can neither write nor leak. `why_not_read_only(argv)` says why a form is not read-only,
or None when it is.

The table is an allowlist, as Claude Code's read-only list is, and stricter than Codex's
`is_safe_command` (which lists the options it refuses): each program names every option its
read-only forms may use (`readonly_options`: parsed as getopt would, so no abbreviation, bundle
or attached value slips an option past it), how many operands are data rather than files, and
what else it checks (sed's and awk's scripts, a date that is only printed, a branch that is
only listed). Whatever is not listed is not read-only: `sort -o`, `tail -f`, `uniq in out`,
`tree -o`, `file -C`, `git log --output`, `git branch new`, `rg --pre`, `find -delete`.

An **output filter** (`why_not_filter`) is a read-only form that reads nothing but its input:
no file operand, no option naming a file (`grep -f`), none that reads a tree (`grep -r`), no
script that reads files or the environment (sed's `r`, awk's `getline` and `ENVIRON`, jq's
`env`). `npm test 2>&1 | tail -20` adds nothing to what `npm test` does, so a grant for `npm
test` covers it (`runtime.permissions.commandkey`); a filter that could read something else
(`| cat ~/.ssh/id_rsa`, `| grep -f ~/.netrc x`) would widen the grant, so it is not a filter.
Filters run wherever the command runs, on the host too, which is why they are held to this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from codecoder.permissions.programs.awk import awk_program_problem
from codecoder.permissions.programs.readonly_git import git_read_only
from codecoder.permissions.programs.readonly_options import (
    NotReadOnly,
    Options,
    Parsed,
    Takes,
    flags,
    parse_options,
)
from codecoder.permissions.programs.sed import sed_script_problem

__all__ = ["READ_ONLY", "why_not_filter", "why_not_read_only"]

N, V, F, OPT = Takes.NUMBER, Takes.VALUE, Takes.FILE, Takes.OPTIONAL

Check = Callable[[str, Parsed, bool], None]
"""A program's own check of a parsed form (`filter`: judged as an output filter); it raises
NotReadOnly to say why not."""


@dataclass(frozen=True, slots=True)
class ReadOnlyForm:
    """The read-only forms of one program.

    `data`: how many leading operands are data, not files (grep's pattern, tr's sets; all of
    them when None), unless one of `data_options` gave it (`grep -e PATTERN`). `max_files`:
    at most this many file operands (`uniq IN [OUT]` writes OUT: 1). `stdin`: with no file
    operand it reads its input, so it may be an output filter. `tree`: options that make it
    read files it does not name (`grep -r`, `sha256sum -c`). `check`: the program's own check.
    """

    options: Options
    data: int | None = 0
    data_options: tuple[str, ...] = ()
    max_files: int | None = None
    stdin: bool = True
    tree: tuple[str, ...] = ()
    check: Check | None = None

    def judge(self, program: str, args: Sequence[str], filter: bool) -> None:
        parsed = parse_options(program, args, self.options)
        data = self.data
        if data is None:
            data = len(parsed.operands)
        elif self.data_options and parsed.has(*self.data_options):
            data = 0
        files = [word for word in parsed.operands[data:] if word != "-"]
        if self.max_files is not None and len(parsed.operands) - data > self.max_files:
            raise NotReadOnly(
                f"{program} with {len(parsed.operands) - data} file operands: the last one "
                "may be written"
            )
        if self.check is not None:
            self.check(program, parsed, filter)
        if not filter:
            return
        if not self.stdin:
            raise NotReadOnly(f"{program} does not read its input: it is not an output filter")
        if files:
            raise NotReadOnly(
                f"{program} {files[0]}: an output filter reads only its input, not files"
            )
        named = parsed.files_by_option(self.options.flags)
        if named:
            raise NotReadOnly(f"{program} {named[0]}: an output filter reads no other file")
        for name, _ in parsed.options:
            if name in self.tree:
                raise NotReadOnly(f"{program} {name}: reads files an output filter must not")


def why_not_read_only(argv: Sequence[str]) -> str | None:
    """Why `argv` (a simple command) is not a read-only form, or None when it is."""
    return _judge(argv, filter=False)


def why_not_filter(argv: Sequence[str]) -> str | None:
    """Why `argv` is not an output filter (a read-only form that reads only its input), or
    None when it is."""
    return _judge(argv, filter=True)


def _judge(argv: Sequence[str], *, filter: bool) -> str | None:
    program = argv[0]
    # The program by its bare name, exactly: a path (`./ls`, `/tmp/cat`) is whatever that
    # file is, and another spelling (`LS`, `ls.exe`) is not the program the table describes.
    form = READ_ONLY.get(program)
    if form is None:
        return f"{program} is not a program the read-only table knows"
    args = list(argv[1:])
    try:
        if isinstance(form, ReadOnlyForm):
            form.judge(program, args, filter)
        else:
            form(program, args, filter)
    except NotReadOnly as why:
        return str(why)
    return None


# --- program-specific checks ------------------------------------------------------------------


def _no_operands(program: str, parsed: Parsed, filter: bool) -> None:
    if parsed.operands:
        raise NotReadOnly(f"{program} {parsed.operands[0]}: an operand may change something")


def _one_directory(program: str, parsed: Parsed, filter: bool) -> None:
    if len(parsed.operands) > 1:
        raise NotReadOnly(f"{program} with more than one directory")


def _date(program: str, parsed: Parsed, filter: bool) -> None:
    for word in parsed.operands:
        if not word.startswith("+"):
            raise NotReadOnly(f"date {word}: sets the clock (only a +FORMAT is printed)")


def _sed(program: str, args: Sequence[str], filter: bool) -> None:
    parsed = parse_options(program, args, _SED)
    operands = list(parsed.operands)
    scripts = parsed.values("-e", "--expression")
    if not scripts:
        if not operands:
            raise NotReadOnly(f"{program} without a script")
        scripts = [operands.pop(0)]
    problem = sed_script_problem("\n".join(scripts), reads=not filter)
    if problem is not None:
        raise NotReadOnly(f"{program} script: {problem}")
    if filter and [word for word in operands if word != "-"]:
        raise NotReadOnly(f"{program} {operands[0]}: an output filter reads only its input")


_SED = Options(
    {
        **flags("-n --quiet --silent -E -r --regexp-extended -s --separate -z --null-data"),
        **flags("-u --unbuffered --posix --debug --sandbox --help --version"),
        **flags("-e --expression", V),
        **flags("-l --line-length", N),
    }
)


def _awk(program: str, args: Sequence[str], filter: bool) -> None:
    parsed = parse_options(program, args, _AWK)
    operands = list(parsed.operands)
    texts = parsed.values("-e", "--source")
    if not texts:
        if not operands:
            raise NotReadOnly(f"{program} without a program")
        texts = [operands.pop(0)]
    text = "\n".join(texts)
    problem = awk_program_problem(text)
    if problem is not None:
        raise NotReadOnly(f"{program} program: {problem}")
    if filter:
        for word in ("getline", "ENVIRON", "PROCINFO", "ARGV", "FILENAME"):
            if word in text:
                raise NotReadOnly(f"{program} program: {word} reads beyond its input")
        # Operands after the program are files, or assignments that take effect between them.
        if [word for word in operands if word != "-"]:
            raise NotReadOnly(f"{program} {operands[0]}: an output filter reads only its input")


_AWK = Options(
    {
        **flags("-F -v --field-separator --assign -e --source", V),
        **flags("-b --characters-as-bytes -c --traditional -n --non-decimal-data -N"),
        **flags("--use-lc-numeric -P --posix -r --re-interval -S --sandbox -V --version"),
        **flags("--csv -s --no-optimize"),
    }
)


def _jq(program: str, args: Sequence[str], filter: bool) -> None:
    rest: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("--arg", "--argjson"):  # a name and a value, both data
            if i + 2 >= len(args):
                raise NotReadOnly(f"jq {word}: its name and value are missing")
            i += 3
            continue
        if word in ("--slurpfile", "--rawfile"):
            if filter:
                raise NotReadOnly(f"jq {word}: reads a file an output filter must not")
            i += 3
            continue
        rest.append(word)
        i += 1
    parsed = parse_options(program, rest, _JQ)
    if not parsed.operands:
        return  # `jq` alone prints its input
    text = parsed.operands[0]
    for word in ("include", "import", "input_filename", "$__prog", "env", "$ENV", "@sh"):
        if word in text and (filter or word in ("include", "import")):
            raise NotReadOnly(f"jq filter: {word} reads beyond its input")
    if filter and parsed.operands[1:]:
        raise NotReadOnly(f"jq {parsed.operands[1]}: an output filter reads only its input")


_JQ = Options(
    {
        **flags("-r --raw-output -j --join-output -a --ascii-output -c --compact-output"),
        **flags("-n --null-input -s --slurp -e --exit-status -S --sort-keys -C -M --tab"),
        **flags("--color-output --monochrome-output --seq --stream -R --raw-input"),
        **flags("--raw-output0 --unbuffered -h --help -V --version"),
        **flags("--indent", N),
    }
)


def _find(program: str, args: Sequence[str], filter: bool) -> None:
    """find's start points, then its expression: every primary must be one that only tests or
    prints to standard output (no -exec, -ok, -delete, -fprint, -fls and the rest)."""
    if filter:
        raise NotReadOnly("find does not read its input: it is not an output filter")
    i = 0
    while i < len(args) and args[i] in ("-H", "-L", "-P"):
        i += 1
    while i < len(args) and not args[i].startswith(("-", "(", "!", ")", ",")):
        i += 1  # start points
    while i < len(args):
        word = args[i]
        i += 1
        if word in _FIND_OPERATORS or word in _FIND_FLAGS:
            continue
        takes = _FIND_VALUES.get(word)
        if takes is None and word.startswith("-newer") and len(word) == 8:
            takes = 1  # -newerXY REFERENCE
        if takes is None:
            raise NotReadOnly(f"find {word}: not a primary of its read-only forms")
        if i + takes > len(args):
            raise NotReadOnly(f"find {word}: its value is missing")
        i += takes


_FIND_OPERATORS = frozenset({"(", ")", "!", ",", "-not", "-a", "-and", "-o", "-or"})
_FIND_FLAGS = frozenset(
    {
        *("-print", "-print0", "-ls", "-prune", "-quit", "-true", "-false", "-empty"),
        *("-executable", "-readable", "-writable", "-nouser", "-nogroup", "-depth", "-mount"),
        *("-xdev", "-noleaf", "-ignore_readdir_race", "-noignore_readdir_race", "-daystart"),
        *("-follow", "-help", "--help", "-version", "--version"),
    }
)
_FIND_VALUES = {
    **dict.fromkeys(
        (
            *("-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex"),
            *("-iregex", "-lname", "-ilname", "-type", "-xtype", "-size", "-perm", "-user"),
            *("-group", "-uid", "-gid", "-links", "-inum", "-samefile", "-newer", "-anewer"),
            *("-cnewer", "-amin", "-cmin", "-mmin", "-atime", "-ctime", "-mtime", "-used"),
            *("-maxdepth", "-mindepth", "-regextype", "-fstype", "-printf", "-context"),
        ),
        1,
    ),
}


def _git(program: str, args: Sequence[str], filter: bool) -> None:
    if filter:
        raise NotReadOnly("git does not read its input: it is not an output filter")
    git_read_only(program, args)


def _test(program: str, args: Sequence[str], filter: bool) -> None:
    """`test` evaluates its arguments and exits: it reads file metadata at most. (`[` is never
    a simple command: its name and its closing `]` are glob characters to bash.)"""
    if filter:
        raise NotReadOnly(f"{program} does not read its input: it is not an output filter")


# --- the table ----------------------------------------------------------------------------------

_GREP = Options(
    {
        **flags("-e --regexp --label --group-separator --binary-files -D --devices", V),
        **flags("-d --directories --exclude --exclude-dir --include --color --colour", V),
        **flags("-f --file --exclude-from", F),
        **flags("-m --max-count -A --after-context -B --before-context -C --context", N),
        **flags("-F --fixed-strings -G --basic-regexp -E --extended-regexp -P --perl-regexp"),
        **flags("-i -y --ignore-case --no-ignore-case -v --invert-match -w --word-regexp"),
        **flags("-x --line-regexp -c --count -L --files-without-match -l"),
        **flags("--files-with-matches -o --only-matching -q --quiet --silent -s"),
        **flags("--no-messages -b --byte-offset -H --with-filename -h --no-filename -n"),
        **flags("--line-number -T --initial-tab -Z --null -z --null-data"),
        **flags("--no-group-separator -a --text -I -r --recursive -R"),
        **flags("--dereference-recursive --line-buffered -U --binary --help -V --version"),
    },
    digits=True,
)
_GREP_PATTERNS = ("-e", "--regexp", "-f", "--file")
_GREP_TREE = ("-r", "--recursive", "-R", "--dereference-recursive", "-d", "--directories")

_LS_LETTERS = "aAbBcCdDfFgGhHiklLmnNopqQrRsStuUvxXZ1"
_SUMS = Options(
    {
        **flags("-b --binary -t --text -c --check --ignore-missing --quiet --status --strict"),
        **flags("-w --warn --tag -z --zero --help --version"),
    }
)

READ_ONLY: dict[str, ReadOnlyForm | Callable[[str, Sequence[str], bool], None]] = {
    "ls": ReadOnlyForm(
        Options(
            {
                **{
                    f"-{letter}": Takes.NOTHING
                    for letter in "aAbBcCdDfFgGhHiklLmnNopqQrRsStuUvxXZ1"
                },
                **flags("-I --ignore --hide --format --sort --time --time-style", V),
                **flags("--quoting-style --indicator-style --block-size", V),
                **flags("-w --width -T --tabsize", N),
                **flags("--color --classify --hyperlink", OPT),
                **flags("--all --almost-all --author --escape --ignore-backups --directory"),
                **flags("--dired --file-type --full-time --group-directories-first --no-group"),
                **flags("--human-readable --si --dereference-command-line --inode --kibibytes"),
                **flags("--dereference-command-line-symlink-to-dir --dereference --literal"),
                **flags("--numeric-uid-gid --hide-control-chars --show-control-chars"),
                **flags("--quote-name --reverse --recursive --size --context --zero --help"),
                **flags("--version"),
            }
        ),
        stdin=False,
    ),
    "cat": ReadOnlyForm(
        Options(
            flags(
                "-A -b -e -E -n -s -t -T -u -v --show-all --number-nonblank --show-ends "
                "--number --squeeze-blank --show-tabs --show-nonprinting --help --version"
            )
        )
    ),
    "head": ReadOnlyForm(
        Options(
            {
                **flags("-c --bytes -n --lines", N),
                **flags("-q --quiet --silent -v --verbose -z --zero-terminated --help --version"),
            },
            digits=True,
        )
    ),
    # Not -f/-F/--follow/--retry/--pid: a command that never ends is not a read.
    "tail": ReadOnlyForm(
        Options(
            {
                **flags("-c --bytes -n --lines", N),
                **flags("-q --quiet --silent -v --verbose -z --zero-terminated --help --version"),
            },
            digits=True,
        )
    ),
    "wc": ReadOnlyForm(
        Options(
            {
                **flags("-c --bytes -m --chars -l --lines -L --max-line-length -w --words"),
                **flags("--help --version"),
                **flags("--total", V),
                **flags("--files0-from", F),
            }
        )
    ),
    **dict.fromkeys(
        ("grep", "egrep", "fgrep"),
        ReadOnlyForm(_GREP, data=1, data_options=_GREP_PATTERNS, tree=_GREP_TREE),
    ),
    # ripgrep: not --pre, --pre-glob, --hostname-bin or -z/--search-zip (they run programs), and
    # never a filter (it searches the working directory, and reads a config file the
    # environment names).
    "rg": ReadOnlyForm(
        Options(
            {
                **flags("-e --regexp -t --type -T --type-not -g --glob --iglob --color", V),
                **flags("--colors --engine --max-filesize --sort --sortr -r --replace", V),
                **flags("--context-separator --field-match-separator --path-separator", V),
                **flags("-f --file", F),
                **flags("-A --after-context -B --before-context -C --context -m", N),
                **flags("--max-count -j --threads --max-depth -d -M --max-columns", N),
                **flags("-F --fixed-strings -i --ignore-case -S --smart-case -s"),
                **flags("--case-sensitive -w --word-regexp -x --line-regexp -v --invert-match"),
                **flags("-n --line-number -N --no-line-number -l --files-with-matches"),
                **flags("--files-without-match -c --count --count-matches -o --only-matching"),
                **flags("--hidden -. --no-ignore --no-ignore-vcs --no-ignore-parent"),
                **flags("--no-ignore-dot --no-ignore-global --no-ignore-exclude -u -L --follow"),
                **flags("--files --type-list -H --with-filename -I --no-filename --heading"),
                **flags("--no-heading --json -0 --null --column --vimgrep -U --multiline"),
                **flags("--multiline-dotall -P --pcre2 --stats -q --quiet -a --text --trim"),
                **flags("--no-messages --max-columns-preview --passthru -p --pretty -b"),
                **flags("--byte-offset --no-config --help -h -V --version"),
            }
        ),
        data=1,
        data_options=("-e", "--regexp", "-f", "--file", "--files", "--type-list"),
        stdin=False,
    ),
    "find": _find,
    "sed": _sed,
    "awk": _awk,
    "gawk": _awk,
    "mawk": _awk,
    "jq": _jq,
    # Not -o (writes its output), -T (writes temporary files where it is told),
    # --compress-program (runs one).
    "sort": ReadOnlyForm(
        Options(
            {
                **flags("-b --ignore-leading-blanks -d --dictionary-order -f --ignore-case"),
                **flags("-g --general-numeric-sort -h --human-numeric-sort -i"),
                **flags("--ignore-nonprinting -M --month-sort -n --numeric-sort -R"),
                **flags("--random-sort -r --reverse -s --stable -u --unique -V --version-sort"),
                **flags("-z --zero-terminated -c --check -C -m --merge --debug --help"),
                **flags("--version"),
                **flags("--sort -k --key -t --field-separator -S --buffer-size", V),
                **flags("--parallel --batch-size", N),
                **flags("--check", OPT),
                **flags("--files0-from", F),
            }
        )
    ),
    "uniq": ReadOnlyForm(
        Options(
            {
                **flags("-c --count -d --repeated -D -i --ignore-case -u --unique"),
                **flags("-z --zero-terminated --help --version"),
                **flags("-f --skip-fields -s --skip-chars -w --check-chars", N),
                **flags("--all-repeated --group", OPT),
            }
        ),
        max_files=1,  # `uniq IN OUT` writes OUT
    ),
    "cut": ReadOnlyForm(
        Options(
            {
                **flags("-b --bytes -c --characters -f --fields -d --delimiter", V),
                **flags("--output-delimiter", V),
                **flags("-n --complement -s --only-delimited -z --zero-terminated --help"),
                **flags("--version"),
            }
        )
    ),
    "tr": ReadOnlyForm(
        Options(flags("-c -C --complement -d --delete -s --squeeze-repeats -t --truncate-set1")),
        data=None,
        max_files=0,
    ),
    "nl": ReadOnlyForm(
        Options(
            {
                **flags("-b -d -f -h -n -s --body-numbering --section-delimiter", V),
                **flags("--footer-numbering --header-numbering --number-format", V),
                **flags("--number-separator", V),
                **flags("-i -l -v -w --line-increment --join-blank-lines", N),
                **flags("--starting-line-number --number-width", N),
                **flags("-p --no-renumber --help --version"),
            }
        )
    ),
    "tac": ReadOnlyForm(Options({**flags("-b --before -r --regex"), **flags("-s --separator", V)})),
    "rev": ReadOnlyForm(Options(flags("--help --version"))),
    "column": ReadOnlyForm(
        Options(
            {
                **flags("-t --table -x --fillrows -n -e -J --json -L --keep-empty-lines"),
                **flags("-s --separator -o --output-separator -N --table-columns", V),
                **flags("-R --table-right -T --table-truncate -W --table-wrap -H", V),
                **flags("--table-hide -l --table-columns-limit -d --table-noheadings", V),
                **flags("-c --output-width", N),
            }
        )
    ),
    "fold": ReadOnlyForm(
        Options({**flags("-b --bytes -s --spaces"), **flags("-w --width", N)}, digits=True)
    ),
    "fmt": ReadOnlyForm(
        Options(
            {
                **flags("-c --crown-margin -t --tagged-paragraph -s --split-only -u"),
                **flags("--uniform-spacing"),
                **flags("-p --prefix", V),
                **flags("-w --width -g --goal", N),
            },
            digits=True,
        )
    ),
    "expand": ReadOnlyForm(Options({**flags("-i --initial"), **flags("-t --tabs", V)})),
    "unexpand": ReadOnlyForm(Options({**flags("-a --all --first-only"), **flags("-t --tabs", V)})),
    "paste": ReadOnlyForm(
        Options({**flags("-s --serial -z --zero-terminated"), **flags("-d --delimiters", V)})
    ),
    "comm": ReadOnlyForm(
        Options(
            {
                **flags("-1 -2 -3 --check-order --nocheck-order --total -z --zero-terminated"),
                **flags("--output-delimiter", V),
            }
        ),
        stdin=False,
    ),
    "cmp": ReadOnlyForm(
        Options(
            {
                **flags("-b --print-bytes -l --verbose -s --quiet --silent"),
                **flags("-i --ignore-initial", V),
                **flags("-n --bytes", N),
            }
        ),
        stdin=False,
    ),
    # Not -l/--paginate (runs pr).
    "diff": ReadOnlyForm(
        Options(
            {
                **flags("-q --brief -s --report-identical-files -c -u -e --ed -n --rcs -y"),
                **flags("--side-by-side -t --expand-tabs -T --initial-tab -r --recursive -N"),
                **flags("--new-file --unidirectional-new-file -i --ignore-case -E"),
                **flags("--ignore-tab-expansion -Z --ignore-trailing-space -b"),
                **flags("--ignore-space-change -w --ignore-all-space -B --ignore-blank-lines"),
                **flags("--strip-trailing-cr -a --text -d --minimal --speed-large-files"),
                **flags("--suppress-common-lines --left-column --no-dereference -p"),
                **flags("--show-c-function --ignore-file-name-case --no-ignore-file-name-case"),
                **flags("--suppress-blank-empty --help -v --version"),
                **flags("-C -U -W --width --tabsize --horizon-lines", N),
                **flags("--context --unified --color", OPT),
                **flags("-x --exclude -S --starting-file -I --ignore-matching-lines -D", V),
                **flags("--ifdef --label --palette -F --show-function-line --line-format", V),
                **flags("--old-line-format --new-line-format --unchanged-line-format", V),
                **flags("--old-group-format --new-group-format --changed-group-format", V),
                **flags("--unchanged-group-format", V),
                **flags("-X --exclude-from --from-file --to-file", F),
            }
        ),
        stdin=False,
    ),
    "stat": ReadOnlyForm(
        Options(
            {
                **flags("-L --dereference -f --file-system -t --terse --help --version"),
                **flags("-c --format --printf --cached", V),
            }
        ),
        stdin=False,
    ),
    # Not -C/--compile (writes a .mgc file), -p/--preserve-date (writes times back),
    # -z/-Z (runs decompressors), -S/--no-sandbox.
    "file": ReadOnlyForm(
        Options(
            {
                **flags("-b --brief -i --mime --mime-type --mime-encoding -c"),
                **flags("--checking-printout -h --no-dereference -L --dereference -k"),
                **flags("--keep-going -l --list -n --no-buffer -N --no-pad -0 --print0 -r"),
                **flags("--raw -s --special-files -E --extension --apple --help -v --version"),
                **flags("-e --exclude --exclude-quiet -F --separator -P --parameter", V),
                **flags("-f --files-from -m --magic-file", F),
            }
        ),
        stdin=False,
    ),
    "du": ReadOnlyForm(
        Options(
            {
                **flags("-0 --null -a --all -b --bytes -c --total -D -H -h --human-readable"),
                **flags("-k -l --count-links -L --dereference -m -P --no-dereference -s"),
                **flags("--summarize -S --separate-dirs --si -x --one-file-system --inodes"),
                **flags("--apparent-size --dereference-args --help --version"),
                **flags("-B --block-size -t --threshold --exclude --time-style", V),
                **flags("-d --max-depth", N),
                **flags("--time", OPT),
                **flags("-X --exclude-from --files0-from", F),
            }
        ),
        stdin=False,
    ),
    "df": ReadOnlyForm(
        Options(
            {
                **flags("-a --all -h --human-readable -H --si -i --inodes -k -l --local -P"),
                **flags("--portability -T --print-type --total --no-sync --help --version"),
                **flags("-B --block-size -t --type -x --exclude-type", V),
                **flags("--output", OPT),
            }
        ),
        stdin=False,
    ),
    "pwd": ReadOnlyForm(Options(flags("-L -P --help --version")), stdin=False, check=_no_operands),
    "whoami": ReadOnlyForm(Options(flags("--help --version")), stdin=False, check=_no_operands),
    "id": ReadOnlyForm(
        Options(flags("-u -g -G -n -r -z -a -Z --user --group --groups --name --real --zero")),
        data=None,
        stdin=False,
    ),
    "uname": ReadOnlyForm(
        Options(
            flags(
                "-a -s -n -r -v -m -p -i -o --all --kernel-name --nodename --kernel-release "
                "--kernel-version --machine --processor --hardware-platform --operating-system "
                "--help --version"
            )
        ),
        stdin=False,
        check=_no_operands,
    ),
    "nproc": ReadOnlyForm(
        Options({**flags("--all --help --version"), **flags("--ignore", N)}),
        stdin=False,
        check=_no_operands,
    ),
    "true": ReadOnlyForm(Options({}), data=None, stdin=False),
    "false": ReadOnlyForm(Options({}), data=None, stdin=False),
    "basename": ReadOnlyForm(
        Options({**flags("-a --multiple -z --zero"), **flags("-s --suffix", V)}),
        data=None,
        stdin=False,
    ),
    "dirname": ReadOnlyForm(Options(flags("-z --zero")), data=None, stdin=False),
    "realpath": ReadOnlyForm(
        Options(
            {
                **flags("-e --canonicalize-existing -m --canonicalize-missing -L --logical"),
                **flags("-P --physical -q --quiet -s --strip --no-symlinks -z --zero"),
                **flags("--relative-to --relative-base", V),
            }
        ),
        data=None,
        stdin=False,
    ),
    "readlink": ReadOnlyForm(
        Options(
            flags(
                "-f --canonicalize -e --canonicalize-existing -m --canonicalize-missing -n "
                "--no-newline -q --quiet -s --silent -v --verbose -z --zero"
            )
        ),
        data=None,
        stdin=False,
    ),
    "which": ReadOnlyForm(Options(flags("-a -s")), data=None, stdin=False),
    "echo": ReadOnlyForm(Options(flags("-n -e -E")), data=None, stdin=False),
    "printf": ReadOnlyForm(Options({}), data=None, stdin=False),
    "seq": ReadOnlyForm(
        Options({**flags("-w --equal-width"), **flags("-f --format -s --separator", V)}),
        data=None,
        stdin=False,
    ),
    "expr": ReadOnlyForm(Options({}, permute=False), data=None, stdin=False),
    "date": ReadOnlyForm(
        Options(
            {
                **flags("-u --utc --universal -R --rfc-email --debug --help --version"),
                **flags("-d --date --rfc-3339", V),
                **flags("-I --iso-8601", OPT),
                **flags("-r --reference", F),
            }
        ),
        data=None,
        stdin=False,
        check=_date,
    ),
    "hostname": ReadOnlyForm(
        Options(
            flags(
                "-f --fqdn --long -s --short -i --ip-address -I --all-ip-addresses -a --alias "
                "-d --domain -A --all-fqdns -v --verbose --help -V --version"
            )
        ),
        stdin=False,
        check=_no_operands,  # `hostname NAME` sets it
    ),
    "md5sum": ReadOnlyForm(_SUMS, tree=("-c", "--check")),
    "sha1sum": ReadOnlyForm(_SUMS, tree=("-c", "--check")),
    "sha224sum": ReadOnlyForm(_SUMS, tree=("-c", "--check")),
    "sha256sum": ReadOnlyForm(_SUMS, tree=("-c", "--check")),
    "sha384sum": ReadOnlyForm(_SUMS, tree=("-c", "--check")),
    "sha512sum": ReadOnlyForm(_SUMS, tree=("-c", "--check")),
    "b2sum": ReadOnlyForm(_SUMS | flags("-l --length", N), tree=("-c", "--check")),
    "cksum": ReadOnlyForm(
        _SUMS | {**flags("-a --algorithm", V), **flags("-l --length", N), **flags("--base64")},
        tree=("-c", "--check"),
    ),
    "base64": ReadOnlyForm(
        Options({**flags("-d --decode -i --ignore-garbage"), **flags("-w --wrap", N)}),
        max_files=1,
    ),
    "base32": ReadOnlyForm(
        Options({**flags("-d --decode -i --ignore-garbage"), **flags("-w --wrap", N)}),
        max_files=1,
    ),
    # `xxd IN OUT` writes OUT: one file at most.
    "xxd": ReadOnlyForm(
        Options(
            {
                **flags("-a -autoskip -b -bits -C -capitalize -E -EBCDIC -e -h -help -i"),
                **flags("-include -p -ps -postscript -plain -r -revert -u -uppercase -d -v"),
                **flags("-version"),
                **flags("-c -cols -g -groupsize -l -len -o -offset", N),
                **flags("-n -name -s -seek -R", V),
            }
        ),
        max_files=1,
    ),
    "od": ReadOnlyForm(
        Options(
            {
                **flags("-a -b -c -d -f -i -l -o -s -x -v --output-duplicates --traditional"),
                **flags("-A --address-radix -t --format --endian", V),
                **flags("-j --skip-bytes -N --read-bytes", N),
                **flags("-S -w --strings --width", OPT),
            }
        )
    ),
    "hexdump": ReadOnlyForm(
        Options(
            {
                **flags("-b -c -C --canonical -d -o -x -v --no-squeezing"),
                **flags("-e --format -s --skip -L --color", V),
                **flags("-n --length", N),
                **flags("-f --format-file", F),
            }
        )
    ),
    "strings": ReadOnlyForm(
        Options(
            {
                **flags("-a --all -d --data -f --print-file-name -w --include-all-whitespace"),
                **flags("-t --radix -e --encoding -s --output-separator -U --unicode -T", V),
                **flags("-n --bytes", N),
            },
            digits=True,
        )
    ),
    # Not -o (writes its listing to a file) or -R (writes 00Tree.html files with -H).
    "tree": ReadOnlyForm(
        Options(
            {
                **flags("-a -d -l -f -x -q -N -Q -p -u -g -s -h -D -F -v -t -c -U -r -i -A"),
                **flags("-S -n -C -J -X --gitignore --ignore-case --matchdirs --metafirst"),
                **flags("--prune --info --noreport --si --du --inodes --device --dirsfirst"),
                **flags("--filesfirst --help --version"),
                **flags("-L --filelimit", N),
                **flags("-P -I --charset --timefmt --sort", V),
                **flags("--gitfile --infofile", F),
            }
        ),
        stdin=False,
    ),
    "test": _test,
    # `cd DIR` in a read-only list (`cd src && ls`): bash's own, it changes where the next
    # command of that list runs, nothing else.
    "cd": ReadOnlyForm(Options(flags("-L -P")), data=None, stdin=False, check=_one_directory),
    "git": _git,
}
