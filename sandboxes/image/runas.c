/*
 * runas: become an unprivileged user with nothing else, then run a program.
 *
 * Usage: runas UID GID DIR PROGRAM [ARGS...]
 *
 * The sandbox agent (agent/, root; its capability bounding set holds only CAP_SETUID,
 * CAP_SETGID and CAP_SETPCAP, so that is all this program has) starts every command through
 * it. Python could drop privileges itself (subprocess's `user=`),
 * but only in a forked copy of the whole interpreter, which costs more than the rest of a warm
 * call; starting this small static program with vfork and letting it drop them costs a tenth.
 *
 * It empties the capability bounding set, clears the supplementary groups, sets the real,
 * effective and saved gid, then the same uids (in that order: each needs what the next one
 * takes away), checks with getresuid/getresgid that they took and with capget and
 * PR_CAPBSET_READ that no capability is left, then changes into DIR (as the user: a workspace
 * only its owner may enter, mode 0700, is entered by its owner, which root without
 * CAP_DAC_OVERRIDE could not do) and executes PROGRAM, searched in PATH like Python's
 * subprocess does (no /bin/sh fallback).
 * Exit status: 125 when the identity could not be taken (nothing ran), 126 when DIR cannot be
 * entered or PROGRAM cannot be executed, 127 when it is not found; the message goes to
 * standard error.
 *
 * No libc: the few system calls are made directly, so the binary is static, a few kilobytes,
 * and the same bytes for the same source (sandboxes/build.sh builds and checks it).
 */

typedef unsigned long size_t;

#if defined(__x86_64__)
enum { SYS_write = 1, SYS_chdir = 80, SYS_execve = 59, SYS_exit_group = 231,
       SYS_setgroups = 116,
       SYS_setresuid = 117, SYS_getresuid = 118, SYS_setresgid = 119, SYS_getresgid = 120,
       SYS_capget = 125, SYS_prctl = 157 };

static long sys3(long n, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

__asm__(".text\n.globl _start\n_start:\n\txor %rbp, %rbp\n\tmov %rsp, %rdi\n"
        "\tand $-16, %rsp\n\tcall start\n\thlt\n");
#elif defined(__aarch64__)
enum { SYS_write = 64, SYS_chdir = 49, SYS_execve = 221, SYS_exit_group = 94,
       SYS_setgroups = 159,
       SYS_setresuid = 147, SYS_getresuid = 148, SYS_setresgid = 149, SYS_getresgid = 150,
       SYS_capget = 90, SYS_prctl = 167 };

static long sys3(long n, long a, long b, long c) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
}

__asm__(".text\n.globl _start\n_start:\n\tmov x0, sp\n\tbl start\n");
#else
#error "runas is built for x86_64 and aarch64"
#endif

enum { ENOENT = 2, EACCES = 13, ENOTDIR = 20, EINVAL = 22 };
enum { PR_CAPBSET_READ = 23, PR_CAPBSET_DROP = 24, LAST_CAPABILITY = 63 };

static size_t length(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static void say(const char *a, const char *b) {
    sys3(SYS_write, 2, (long)a, (long)length(a));
    sys3(SYS_write, 2, (long)b, (long)length(b));
}

static __attribute__((noreturn)) void leave(int code) {
    for (;;) sys3(SYS_exit_group, code, 0, 0);
}

static int number(const char *s, unsigned *out) {
    unsigned long value = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        value = value * 10 + (unsigned long)(*s - '0');
        if (value > 0xfffffffeUL) return -1;
    }
    *out = (unsigned)value;
    return 0;
}

static int starts(const char *s, const char *prefix) {
    while (*prefix)
        if (*s++ != *prefix++) return 0;
    return 1;
}

static int contains_slash(const char *s) {
    for (; *s; s++)
        if (*s == '/') return 1;
    return 0;
}

struct cap_header { unsigned version; int pid; };
struct cap_data { unsigned effective, permitted, inheritable; };

static void become(unsigned uid, unsigned gid) {
    unsigned r, e, s;
    struct cap_header header = {0x20080522, 0};  /* _LINUX_CAPABILITY_VERSION_3 */
    struct cap_data data[2] = {{1, 1, 1}, {1, 1, 1}};
    /* The bounding set first (that needs CAP_SETPCAP, which the uid change takes away):
     * nothing the command executes can ever gain a capability back. */
    for (long cap = 0; cap <= LAST_CAPABILITY; cap++) {
        long dropped = sys3(SYS_prctl, PR_CAPBSET_DROP, cap, 0);
        if (dropped && dropped != -EINVAL) {
            say("runas: ", "cannot empty the capability bounding set\n");
            leave(125);
        }
    }
    if (sys3(SYS_setgroups, 0, 0, 0) || sys3(SYS_setresgid, gid, gid, gid) ||
        sys3(SYS_setresuid, uid, uid, uid)) {
        say("runas: ", "cannot change user\n");
        leave(125);
    }
    if (sys3(SYS_getresuid, (long)&r, (long)&e, (long)&s) || r != uid || e != uid || s != uid ||
        sys3(SYS_getresgid, (long)&r, (long)&e, (long)&s) || r != gid || e != gid || s != gid) {
        say("runas: ", "the user did not change\n");
        leave(125);
    }
    if (sys3(SYS_capget, (long)&header, (long)data, 0) || data[0].effective ||
        data[0].permitted || data[0].inheritable || data[1].effective || data[1].permitted ||
        data[1].inheritable) {
        say("runas: ", "capabilities were kept\n");
        leave(125);
    }
    for (long cap = 0; cap <= LAST_CAPABILITY; cap++) {
        if (sys3(SYS_prctl, PR_CAPBSET_READ, cap, 0) > 0) {
            say("runas: ", "the capability bounding set is not empty\n");
            leave(125);
        }
    }
}

static __attribute__((noreturn)) void failed(const char *program, long error) {
    say(program, error == -EACCES ? ": permission denied\n" : error == -ENOENT || error == -ENOTDIR
                                                                  ? ": command not found\n"
                                                                  : ": cannot be executed\n");
    leave(error == -ENOENT || error == -ENOTDIR ? 127 : 126);
}

__attribute__((used)) void start(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    unsigned uid, gid;
    if (argc < 5 || number(argv[1], &uid) || number(argv[2], &gid) || uid == 0 || gid == 0) {
        say("usage: ", "runas UID GID DIR PROGRAM [ARGS...] (never uid or gid 0)\n");
        leave(125);
    }
    become(uid, gid);
    long entered = sys3(SYS_chdir, (long)argv[3], 0, 0);
    if (entered) {
        say(argv[3], entered == -EACCES ? ": the working directory cannot be entered (permission "
                                          "denied)\n"
                                        : ": the working directory cannot be entered\n");
        leave(126);
    }
    char *program = argv[4], **args = argv + 4;
    if (contains_slash(program)) failed(program, sys3(SYS_execve, (long)program, (long)args, (long)envp));

    const char *path = "/bin:/usr/bin"; /* os.defpath, as Python uses */
    for (char **e = envp; *e; e++)
        if (starts(*e, "PATH=")) path = *e + 5;
    static char candidate[4096];
    long kept = 0, error = -ENOENT;
    size_t name = length(program);
    for (const char *p = path;; p++) {
        const char *end = p;
        while (*end && *end != ':') end++;
        size_t dir = (size_t)(end - p);
        if (dir + 1 + name < sizeof candidate) {
            size_t i = 0;
            for (; i < dir; i++) candidate[i] = p[i];
            if (!dir) candidate[i++] = '.';
            candidate[i++] = '/';
            for (size_t j = 0; j <= name; j++) candidate[i + j] = program[j];
            error = sys3(SYS_execve, (long)candidate, (long)args, (long)envp);
            if (error != -ENOENT && error != -ENOTDIR && !kept) kept = error;
        }
        if (!*end) break;
        p = end;
    }
    failed(program, kept ? kept : error);
}
