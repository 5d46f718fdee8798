"""The read-only table (SPEC §5): which forms only read, and which may filter another's output.

Every attack is checked twice: the real program is run in a scratch directory to show that the
spelling really writes, deletes or runs something there (so the test would fail if the table
let a working spelling through), then the table must refuse it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from codecoder.permissions.commandkey import key_command
from codecoder.permissions.programs.readonly import why_not_filter, why_not_read_only

# What agents run to look around, as Claude Code and Codex sessions show them.
READ_ONLY = [
    "ls",
    "ls -la",
    "ls -la src/",
    "ls -1 --color=never",
    "ls -lhS --sort=size tests",
    "cat README.md",
    "cat -n setup.cfg",
    "head -5 README.md",
    "head -n 20 src/app.py",
    "head -c 1K data.bin",
    "tail -30 log.txt",
    "tail -n +5 log.txt",
    "wc -l src/app.py",
    "wc -lw a b",
    "grep -rn foo src/",
    "grep -rn --include='*.py' 'def main' .",
    "grep -E -i 'a|b' f",
    "grep -e x -e y f",
    "grep -A3 -B 2 x f",
    "grep -5 x f",
    "egrep x f",
    "rg -n foo",
    "rg --files",
    "rg -t py -g '!tests' 'import os'",
    "find . -name '*.py'",
    "find src -type f -name '*.rs' -newer Cargo.toml -print",
    "find . -maxdepth 2 -not -path './.git/*' '(' -name a -o -name b ')'",
    "sed -n 120,180p src/app.py",
    "sed -n '1,5p;10p' f",
    "sed 's/a/b/g' f",
    "sed -n -e '/start/,/end/p' f",
    "awk '{print $1}' f",
    "awk -F: '{ n += $3 } END { print n }' /etc/passwd",
    "sort f",
    "sort -u -k2,2 -t, f",
    "sort -rn f",
    "uniq -c f",
    "cut -d: -f1 /etc/passwd",
    "tr a-z A-Z",
    "diff -u a b",
    "diff -r --brief a b",
    "stat f",
    "stat -c %s f",
    "file f",
    "file --mime-type f",
    "du -sh .",
    "du -h --max-depth=1",
    "df -h",
    "pwd",
    "nl f",
    "tac f",
    "jq .",
    "jq -r '.scripts.test' package.json",
    "jq --arg x y '.[$x]' f",
    "basename a/b.c .c",
    "realpath src",
    "which python3",
    "echo hello",
    "date +%Y",
    "md5sum f",
    "sha256sum -c sums",
    "xxd f",
    "od -c f",
    "strings -n 8 f",
    "column -t f",
    "test -f f",
    "git status",
    "git status -s",
    "git status --porcelain=v1 -uno",
    "git log",
    "git log --oneline -5",
    "git log --oneline -n 20 -- src/app.py",
    "git log -p -3 src/app.py",
    "git log --format=%H%n%s --since=yesterday --author=me",
    "git log --graph --decorate --all",
    "git diff",
    "git diff --stat",
    "git diff --cached",
    "git diff HEAD~1 -- src",
    "git diff --name-only main...HEAD",
    "git show HEAD",
    "git show --stat HEAD~2",
    "git show HEAD:src/app.py",
    "git blame src/app.py",
    "git blame -L 10,20 src/app.py",
    "git branch",
    "git branch -a",
    "git branch -vv",
    "git branch --show-current",
    "git branch --list 'feat/*'",
    "git branch --merged main",
    "git rev-parse HEAD",
    "git rev-parse --abbrev-ref HEAD",
    "git rev-parse --show-toplevel",
    "git ls-files",
    "git ls-files -m --exclude-standard",
    "git ls-tree -r HEAD",
    "git shortlog -sn",
    "git describe --tags --always",
    "git tag",
    "git tag -l 'v1.*'",
    "git remote -v",
    "git remote get-url origin",
    "git config user.name",
    "git config --get remote.origin.url",
    "git config --list",
    "git stash list",
    "git stash show -p",
    "git worktree list",
    "git reflog",
    "git grep -n TODO",
    "git --no-pager log -1",
    "git cat-file -p HEAD",
    "git merge-base HEAD main",
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_the_forms_agents_use_to_look_around_are_read_only(command: str) -> None:
    argv = shlex.split(command)
    assert why_not_read_only(argv) is None
    keyed = key_command(command)
    assert (keyed.compound, keyed.read_only) == (False, argv[0])


# Attacks, each with what it really does when run: a file it writes (`out`), a marker a command
# it runs creates (`ran`), or a file it deletes (`victim`).
WRITES = [
    # sort: -o in every spelling getopt_long accepts (attached, bundled, long, =, abbreviated,
    # after the operands).
    ("sort -o out f", "out"),
    ("sort -oout f", "out"),
    ("sort -ruoout f", "out"),
    ("sort -r -o out f", "out"),
    ("sort f -o out", "out"),
    ("sort --output=out f", "out"),
    ("sort --output out f", "out"),
    ("sort --outp=out f", "out"),
    ("sort --o=out f", "out"),
    ("sort --compress-program=./run.sh -S 1 f", None),
    # uniq and xxd write their second operand.
    ("uniq f out", "out"),
    ("uniq -c f out", "out"),
    ("uniq -- f out", "out"),
    ("xxd f out", "out"),
    ("xxd -r f out", "out"),
    # sed: writes, in-place edits and commands, in its script and its options.
    ("sed -n 'w out' f", "out"),
    ("sed -n '1w out' f", "out"),
    ("sed 's/a/b/w out' f", "out"),
    ("sed -e '$W out' f", "out"),
    ("sed --expression='1w out' f", "out"),
    ("sed -n '/a/{w out\n}' f", "out"),
    ("sed '1e touch ran' f", "ran"),
    ("sed 's/.*/touch ran/e' f", "ran"),
    ("sed -i s/a/b/ victim", None),
    ("sed -i.bak s/a/b/ f", "f.bak"),
    ("sed --in-place=.bak s/a/b/ f", "f.bak"),
    ("sed --in-pl=.bak s/a/b/ f", "f.bak"),
    ("sed -ni.bak p f", "f.bak"),
    ("sed -f script.sed f", None),
    # find: actions that run, delete or write.
    ("find . -name victim -delete", "-victim"),
    ("find . -name f -exec touch ran ;", "ran"),
    ("find . -name f -execdir touch ran ;", "ran"),
    ("find . -fprint out", "out"),
    ("find . -fprint0 out", "out"),
    ("find . -fprintf out %p", "out"),
    ("find . -fls out", "out"),
    # awk: system(), pipes and redirections.
    ("awk 'BEGIN { system(\"touch ran\") }'", "ran"),
    ("awk '{ print > \"out\" }' f", "out"),
    ('awk \'BEGIN { print "x" | "cat > out" }\'', "out"),
    ("awk 'BEGIN { \"touch ran\" | getline }'", "ran"),
    ("awk -f prog.awk f", "ran"),
    # ripgrep's preprocessor runs a program.
    ("rg --pre ./run.sh a f", "ran"),
    ("rg --pre=./run.sh a f", "ran"),
    # file compiles a magic file.
    ("file -C -m magic", "magic.mgc"),
    ("file --compile --magic-file magic", "magic.mgc"),
    # git: a file written, configuration that runs a program, refs changed.
    ("git log --output=out", "out"),
    ("git diff --output=out HEAD", "out"),
    ("git show --output=out", "out"),
    ("git -c core.fsmonitor='touch ran' status", "ran"),
    ("git -ccore.fsmonitor='touch ran' status", None),
    ("git --config-env=core.fsmonitor=CMD status", "ran"),
    ("git branch newbranch", "-git:newbranch"),
    ("git branch -m main renamed", "-git:renamed"),
    ("git branch --copy main copied", "-git:copied"),
    ("git tag v9", "-git:v9"),
    ("git tag -a v8 -m x", "-git:v8"),
    ("git config x.y z", "-git-config:x.y"),
    ("git config --add x.y z", "-git-config:x.y"),
    ("git stash", None),
    ("git log --format=%G?", None),
    ("git log --pretty=format:%h%x20%GS", None),
    ("git for-each-ref --format=%(signature)", None),
    ("git log --show-signature", None),
    ("git grep -O'touch ran' a", "ran"),
    ("git grep --open-files-in-pager='touch ran' a", "ran"),
    ("git --git-dir=.git status", None),
    ("git -C . status", None),
    ("git -p log", None),
    ("git reflog expire --all", None),
    ("git worktree add ../wt", None),
    ("git remote add other ../x", None),
    # Forms that never end or that change the machine (never run here: as root they would).
    ("tail -f f", None),
    ("tail --follow=name f", None),
    ("tail -F f", None),
    ("date -s 2020-01-01", None),
    ("date 0101000020", None),
    ("hostname evil", None),
    ("diff --paginate a b", None),
    ("diff -l a b", None),
    # Programs not in the table, or named by a path: whatever that file is.
    ("tee out", "out"),
    ("cp f out", "out"),
    ("./ls", None),
    ("/tmp/cat f", None),
    ("LS", None),
    ("less f", None),
    ("env ls", None),
]


def _stage(root: Path) -> dict[str, str]:
    (root / "f").write_text("a\nb\na\n")
    (root / "victim").write_text("x\n")
    (root / "magic").write_text("0 string xyz test\n")
    (root / "script.sed").write_text("1w out\n")
    (root / "prog.awk").write_text('BEGIN { system("touch ran") }\n')
    run_sh = root / "run.sh"
    run_sh.write_text('#!/bin/sh\ntouch ran\ncat "$1"\n')
    run_sh.chmod(0o755)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "f"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "one"], cwd=root, check=True)
    return {
        **os.environ,
        "CMD": "touch ran",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }


def _happened(root: Path, effect: str) -> bool:
    if effect.startswith("-git:"):
        ref = effect.removeprefix("-git:")
        found = subprocess.run(
            ["git", "rev-parse", "--verify", "-q", ref], cwd=root, capture_output=True
        )
        return found.returncode == 0
    if effect.startswith("-git-config:"):
        name = effect.removeprefix("-git-config:")
        found = subprocess.run(["git", "config", name], cwd=root, capture_output=True)
        return found.returncode == 0
    if effect.startswith("-"):
        return not (root / effect[1:]).exists()
    return (root / effect).exists()


@pytest.mark.parametrize(("command", "effect"), WRITES)
def test_an_option_that_writes_or_runs_is_never_read_only_however_it_is_spelled(
    command: str, effect: str | None, tmp_path: Path
) -> None:
    argv = shlex.split(command)
    if effect is not None and shutil.which(argv[0]) is not None:
        env = _stage(tmp_path)
        subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, timeout=20, check=False)
        assert _happened(tmp_path, effect), f"{command!r} did not do what the attack claims"
    assert why_not_read_only(argv) is not None
    assert why_not_filter(argv) is not None
    assert key_command(command).read_only == ""


def test_a_refusal_says_which_option_and_why() -> None:
    assert why_not_read_only(["sort", "-ruoout", "f"]) == (
        "sort -o (in -ruoout): not an option of its read-only forms"
    )
    assert why_not_read_only(["uniq", "f", "out"]) == (
        "uniq with 2 file operands: the last one may be written"
    )
    assert why_not_read_only(["git", "branch", "new"]) == (
        "git branch new: creates, renames or deletes a branch"
    )
    assert why_not_read_only(["./ls"]) == "./ls is not a program the read-only table knows"
    assert why_not_read_only(["sed", "-n", "1w out", "f"]) == (
        "sed script: the w command writes a file"
    )


FILTERS = [
    "head",
    "head -20",
    "head -n 5",
    "tail -30",
    "tail -n +2",
    "grep x",
    "grep -v -i 'warn|error'",
    "grep -c FAIL",
    "grep -e a -e b",
    "wc -l",
    "sort",
    "sort -u",
    "sort -rn -k2",
    "uniq -c",
    "cut -d: -f1",
    "tr -d '\\r'",
    "sed -n 1,5p",
    "sed 's/a/b/'",
    "awk '{print $1}'",
    "awk -F, 'NR > 1 { n++ } END { print n }'",
    "jq .",
    "jq -r '.items[].name'",
    "cat",
    "cat -",
    "nl",
    "tac",
    "rev",
    "column -t",
    "base64 -d",
    "sha256sum",
    "md5sum -",
]


@pytest.mark.parametrize("command", FILTERS)
def test_an_output_filter_reads_only_its_input(command: str) -> None:
    assert why_not_filter(shlex.split(command)) is None


NOT_FILTERS = [
    # Files: a filter that reads another file would show what the grant never covered.
    ("cat ~/.ssh/id_rsa", "an output filter reads only its input"),
    ("head -5 /etc/shadow", "an output filter reads only its input"),
    ("tail -n 3 .env", "an output filter reads only its input"),
    ("grep x ~/.netrc", "an output filter reads only its input"),
    ("grep -f ~/.netrc", "an output filter reads no other file"),
    ("grep --file=/root/.aws/credentials", "an output filter reads no other file"),
    ("grep -f ~/.netrc x", "an output filter reads only its input"),
    ("grep -r x", "reads files an output filter must not"),
    ("grep -R token", "reads files an output filter must not"),
    ("grep -d recurse x", "reads files an output filter must not"),
    ("grep --directories=recurse x", "reads files an output filter must not"),
    ("sort --files0-from=list", "an output filter reads no other file"),
    ("wc --files0-from=list", "an output filter reads no other file"),
    ("sha256sum -c", "reads files an output filter must not"),
    ("sed 'r /etc/passwd'", "the r command reads a file"),
    ("sed '1R /root/.ssh/id_rsa'", "the R command reads a file"),
    ("sed -n p f", "an output filter reads only its input"),
    ("awk '{ while ((getline l < \"/etc/shadow\") > 0) print l }'", "getline"),
    ("awk 'BEGIN { print ENVIRON[\"AWS_SECRET_ACCESS_KEY\"] }'", "ENVIRON"),
    ("awk 'BEGIN { print PROCINFO[\"pid\"] }'", "PROCINFO"),
    ("awk '{print}' /etc/passwd", "an output filter reads only its input"),
    ("jq -n env", "env reads beyond its input"),
    ("jq '$ENV.HOME'", "$ENV reads beyond its input"),
    ("jq -n 'input_filename'", "input_filename reads beyond its input"),
    ("jq --rawfile k /etc/shadow .", "reads a file an output filter must not"),
    ("jq --slurpfile k f .", "reads a file an output filter must not"),
    ("jq . f", "an output filter reads only its input"),
    # Programs that do not read their input at all.
    ("ls", "does not read its input"),
    ("find .", "does not read its input"),
    ("git log", "does not read its input"),
    ("rg x", "does not read its input"),
    ("date", "does not read its input"),
    ("echo x", "does not read its input"),
    # And whatever is not read-only in the first place.
    ("tee out", "not a program the read-only table knows"),
    ("sh", "not a program the read-only table knows"),
    ("xargs rm", "not a program the read-only table knows"),
    ("tail -f", "not an option of its read-only forms"),
]


@pytest.mark.parametrize(("command", "why"), NOT_FILTERS)
def test_a_filter_that_could_read_anything_but_its_input_is_not_a_filter(
    command: str, why: str
) -> None:
    reason = why_not_filter(shlex.split(command))
    assert reason is not None and why in reason


# Read-only forms whose operands hold glob patterns (issue 22 follow-up): read-only too, keyed
# by the whole line, since they run with no question only confined read-only, where whatever
# names the patterns expand to can neither write nor leak.
READ_ONLY_GLOBS = [
    ("wc -l src/*.rs", "wc"),
    ('grep -n "strftime" src/report/*.py', "grep"),
    ("ls *.md", "ls"),
    ("ls -la [a-c]*.txt src/[!_]?.py", "ls"),
    ("cat src/?.py | head -3", "cat, head"),
    ("grep -n x src/*.py | wc -l", "grep, wc"),
    ("sort *", "sort"),
    ("find * -name x", "find"),
    ("git log --oneline -- *.py", "git"),
    ("ls -- * 2>/dev/null", "ls"),
]


@pytest.mark.parametrize(("command", "programs"), READ_ONLY_GLOBS)
def test_a_read_only_form_with_glob_operands_is_read_only_and_keyed_as_the_whole_line(
    command: str, programs: str
) -> None:
    keyed = key_command(command)
    assert (keyed.compound, keyed.read_only, keyed.filters) == (True, programs, "")
    assert keyed.permission_key().raw == f"run_command:{json.dumps(command)}"


# Everything else that makes a line compound still does, glob or not.
STILL_COMPOUND = [
    ("ls $(echo *)", "command substitution"),
    ("ls `echo *`", "command substitution"),
    ("X=1 ls *", "assignment"),
    ("ls * > out", "redirection"),
    ("ls *.md >> out", "redirection"),
    ("ls * &", "background job"),
    ("ls *; touch x", None),
    ("ls {a,b}*", "brace expansion or group"),
    ("ls ~/*", "tilde expansion"),
    ("ls $HOME/*", "parameter expansion"),
    ("ls *(a|b)", None),
    ("ls !(x)", None),
    ("l? *", "program name 'l?'"),  # the program itself a pattern
    ("/bin/l? *", "program name '/bin/l?'"),
    ("rm *", "glob"),
    ("cp * dir", "glob"),
    ("uniq *.txt", "glob"),  # uniq IN [OUT]: a glob may stand for both
    ("sort -o out *", "glob"),
    ("ls -* x", "glob"),  # an option made of a pattern is not a listed option
    ("npm test src/* | tail", "pipeline"),  # a glob never rides on a grant as a filter
    ("npm test 2>&1 | grep x *.log", "redirection"),
    ("cat *.md\nrm x", "newline"),
]


@pytest.mark.parametrize(("command", "reason"), STILL_COMPOUND)
def test_a_glob_keeps_everything_else_that_makes_a_line_compound(
    command: str, reason: str | None
) -> None:
    keyed = key_command(command)
    assert (keyed.compound, keyed.read_only, keyed.filters) == (True, "", "")
    assert keyed.permission_key().raw == f"run_command:{json.dumps(command)}"
    if reason is not None:
        assert keyed.reason == reason


def test_a_glob_expansion_is_really_what_makes_uniq_write(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    (tmp_path / "b.txt").write_text("b\n")
    subprocess.run(["bash", "-c", "uniq *.txt"], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "b.txt").read_text() == "a\n"  # written: so `uniq *.txt` is no read
    assert why_not_read_only(["uniq", "a.txt"]) is None
