/*
 * confine: restrict this process with Landlock and seccomp, then run a program.
 *
 * Usage: confine [OPTIONS] -- PROGRAM [ARGS...]
 *
 *   --write DIR       writes (create, remove, rename, truncate, device ioctls) allowed beneath DIR;
 *                     writes anywhere else are refused by Landlock (repeatable)
 *   --write-file F    writing (not creating or removing) the file F allowed, e.g. /dev/null
 *   --read PATH       reading restricted to beneath these directories (or these files) and the
 *                     --write ones (repeatable; without any, reading is left to the mount
 *                     namespace around this process)
 *   --no-tcp          TCP bind and connect refused (Landlock ABI 4 and later)
 *   --no-inet         no IPv4 or IPv6 socket at all (seccomp): no UDP either, where there is no
 *                     network namespace of its own
 *   --listen PORT FD  before restricting: listen on 127.0.0.1:PORT and hand the listening socket
 *                     to the runtime over the Unix socket FD (SCM_RIGHTS), then close FD
 *   --require-landlock  fail when the kernel has no Landlock (otherwise seccomp alone)
 *   --ptrace          let the command trace its own processes (a debugger, LeakSanitizer), where
 *                     Landlock restricted it: ptrace, process_vm_readv and process_vm_writev are
 *                     then left to Landlock, which refuses them on any process outside this
 *                     Landlock domain (bubblewrap's init, the host's processes, another
 *                     sandbox's); without Landlock they stay refused. @bwrap passes it (its PID
 *                     namespace shows nothing else anyway); the Landlock-only environment,
 *                     which shares the host's PID namespace, does not
 *   --ready FD        once restricted, write one byte to FD (the runtime's sign that the
 *                     sandbox was built and the command is about to start)
 *   --request FD      a warm sandbox: once restricted (and ready), wait on the Unix socket FD
 *                     for the one request it serves, then run that instead of PROGRAM (see
 *                     "The request" below); PROGRAM is still required and ignored
 *
 * @bwrap runs it inside bubblewrap, as the last step before the command: bubblewrap has built
 * the mounts and namespaces by then, and Landlock forbids changing mounts afterwards. The
 * Landlock-only command environment runs it directly on the host with --read and --no-tcp.
 * What it does, in order:
 *
 *   1. PR_SET_NO_NEW_PRIVS: no set-uid or file capability can raise what the command holds;
 *      and every capability dropped (the bounding and ambient sets too, where it may): a
 *      command run as root reads what root owns, never another owner's files;
 *   2. Landlock (the highest ABI the kernel has): writes only beneath the --write directories;
 *      with --read, reads only beneath those; with --no-tcp, no TCP bind or connect (ABI 4);
 *      always, from ABI 6, no connecting to abstract Unix sockets or signalling processes
 *      outside this Landlock domain;
 *   3. a seccomp filter for what namespaces and Landlock do not stop: creating AF_UNIX sockets
 *      (and with --no-inet, IPv4 and IPv6 ones)
 *      (a read-only mount does not stop connect() on a socket file), ptrace and reading or
 *      writing other processes' memory (unless --ptrace, under Landlock: see above; the kernel
 *      checks the filter again after a tracer changes a system call, since Linux 4.8),
 *      pidfd_getfd, the kernel keyrings, the mount family,
 *      new namespaces (unshare, setns, clone with CLONE_NEW*; clone3 answers ENOSYS so that
 *      the C library falls back to clone), io_uring (its operations bypass seccomp), bpf,
 *      perf_event_open, userfaultfd, TIOCSTI and TIOCLINUX (typing into a terminal), module,
 *      kexec, swap, reboot, acct and syslog calls; a set-uid or set-gid bit in the mode of
 *      chmod, fchmod, fchmodat, fchmodat2, mknod(at), creat and of open(at) when it creates
 *      (openat2, whose mode the filter cannot read, answers ENOSYS): nothing the command leaves
 *      on the host's disk runs with more privileges than it had (file capabilities need
 *      CAP_SETFCAP, which it never holds); the x32 ABI's numbers answer ENOSYS, and
 *      any other architecture's system calls (the 32-bit ABIs) kill the process;
 *   4. the byte to --ready's FD; with --request, the request read, its three descriptors
 *      made the standard input, output and error, its directory the working one;
 *      then every descriptor above 2 closed (the request's socket too);
 *   5. PROGRAM executed, searched in PATH as execvp does (no /bin/sh fallback).
 *
 * The request (--request): one message on the stream socket, from the runtime only (the socket
 * is a pair the runtime made; the command never holds it, since it is closed before the exec):
 * a 16-byte header of native 32-bit words (magic 0x51524343, the length of what follows, the
 * number of arguments, the number of environment entries) carrying three descriptors
 * (SCM_RIGHTS: stdin, stdout, stderr), then the working directory, the arguments and the
 * environment, each NUL-terminated. Anything else (end of file, a short or malformed request,
 * other descriptors) exits with 125 and runs nothing. One request per sandbox: the runtime
 * kills the whole sandbox when the command ends.
 *
 * Exit status: 125 when the restriction could not be applied (nothing ran; the message starts
 * with "codecoder-confine:"), 126 when PROGRAM cannot be executed, 127 when it is not found.
 *
 * No libc: the system calls are made directly, so the binary is static, a few kilobytes, and the
 * same bytes for the same source (sandboxes/build.sh builds and checks it).
 */

typedef unsigned long size_t;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#if defined(__x86_64__)
enum {
    SYS_read = 0, SYS_write = 1, SYS_close = 3, SYS_ioctl = 16, SYS_recvmsg = 47, SYS_chdir = 80,
    SYS_dup3 = 292, SYS_socket = 41, SYS_sendmsg = 46,
    SYS_bind = 49, SYS_listen = 50, SYS_setsockopt = 54, SYS_clone = 56, SYS_execve = 59,
    SYS_ptrace = 101, SYS_syslog = 103, SYS_pivot_root = 155, SYS_prctl = 157, SYS_acct = 163,
    SYS_mount = 165, SYS_umount2 = 166, SYS_swapon = 167, SYS_swapoff = 168, SYS_reboot = 169,
    SYS_init_module = 175, SYS_delete_module = 176, SYS_exit_group = 231, SYS_kexec_load = 246,
    SYS_add_key = 248, SYS_request_key = 249, SYS_keyctl = 250, SYS_openat = 257,
    SYS_unshare = 272, SYS_perf_event_open = 298, SYS_name_to_handle_at = 303,
    SYS_open_by_handle_at = 304, SYS_setns = 308, SYS_process_vm_readv = 310,
    SYS_process_vm_writev = 311, SYS_finit_module = 313, SYS_kexec_file_load = 320, SYS_bpf = 321,
    SYS_userfaultfd = 323, SYS_fstat = 5, SYS_capset = 126,
    /* What can give a file a set-uid or set-gid bit (the legacy calls exist only here). */
    SYS_open = 2, SYS_chmod = 90, SYS_fchmod = 91, SYS_creat = 85, SYS_mknod = 133,
    SYS_mknodat = 259, SYS_fchmodat = 268,
};
#define HAS_LEGACY_FILE_CALLS 1
#define AUDIT_ARCH_NATIVE 0xc000003eU /* AUDIT_ARCH_X86_64 */

static long sys6(long n, long a, long b, long c, long d, long e, long f) {
    long r;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}

__asm__(".text\n.globl _start\n_start:\n\txor %rbp, %rbp\n\tmov %rsp, %rdi\n"
        "\tand $-16, %rsp\n\tcall start\n\thlt\n");
#elif defined(__aarch64__)
enum {
    SYS_ioctl = 29, SYS_umount2 = 39, SYS_mount = 40, SYS_pivot_root = 41, SYS_openat = 56,
    SYS_close = 57, SYS_read = 63, SYS_write = 64, SYS_recvmsg = 212, SYS_chdir = 49,
    SYS_dup3 = 24, SYS_acct = 89, SYS_exit_group = 94, SYS_unshare = 97,
    SYS_kexec_load = 104, SYS_init_module = 105, SYS_delete_module = 106, SYS_syslog = 116,
    SYS_ptrace = 117, SYS_reboot = 142, SYS_prctl = 167, SYS_socket = 198, SYS_bind = 200,
    SYS_listen = 201, SYS_setsockopt = 208, SYS_sendmsg = 211, SYS_add_key = 217,
    SYS_request_key = 218, SYS_keyctl = 219, SYS_clone = 220, SYS_execve = 221, SYS_swapon = 224,
    SYS_swapoff = 225, SYS_perf_event_open = 241, SYS_name_to_handle_at = 264,
    SYS_open_by_handle_at = 265, SYS_setns = 268, SYS_process_vm_readv = 270,
    SYS_process_vm_writev = 271, SYS_finit_module = 273, SYS_bpf = 280, SYS_userfaultfd = 282,
    SYS_kexec_file_load = 294, SYS_fstat = 80, SYS_capset = 91,
    SYS_mknodat = 33, SYS_fchmod = 52, SYS_fchmodat = 53,
};
#define HAS_LEGACY_FILE_CALLS 0
#define AUDIT_ARCH_NATIVE 0xc00000b7U /* AUDIT_ARCH_AARCH64 */

static long sys6(long n, long a, long b, long c, long d, long e, long f) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}

__asm__(".text\n.globl _start\n_start:\n\tmov x0, sp\n\tbl start\n");
#else
#error "confine is built for x86_64 and aarch64"
#endif

/* The same numbers on every architecture (the newer system calls are numbered in common). */
enum {
    SYS_io_uring_setup = 425, SYS_io_uring_enter = 426, SYS_io_uring_register = 427,
    SYS_open_tree = 428, SYS_move_mount = 429, SYS_fsopen = 430, SYS_fsconfig = 431,
    SYS_fsmount = 432, SYS_fspick = 433, SYS_clone3 = 435, SYS_close_range = 436,
    SYS_openat2 = 437, SYS_pidfd_getfd = 438, SYS_mount_setattr = 442,
    SYS_landlock_create_ruleset = 444, SYS_landlock_add_rule = 445,
    SYS_landlock_restrict_self = 446, SYS_fchmodat2 = 452,
};

#define sys0(n) sys6(n, 0, 0, 0, 0, 0, 0)
#define sys1(n, a) sys6(n, (long)(a), 0, 0, 0, 0, 0)
#define sys2(n, a, b) sys6(n, (long)(a), (long)(b), 0, 0, 0, 0)
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define sys4(n, a, b, c, d) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define sys5(n, a, b, c, d, e) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

enum { ENOENT = 2, EPERM = 1, EACCES = 13, ENOTDIR = 20, EINVAL = 22, ENOSYS = 38 };
enum { AT_FDCWD = -100, O_PATH = 010000000, O_CLOEXEC = 02000000 };
enum { PR_SET_NO_NEW_PRIVS = 38, PR_SET_SECCOMP = 22, SECCOMP_MODE_FILTER = 2 };
enum { PR_CAPBSET_DROP = 24, PR_CAP_AMBIENT = 47, PR_CAP_AMBIENT_CLEAR_ALL = 4 };
#define CAPABILITY_VERSION_3 0x20080522U
enum { AF_UNIX = 1, AF_INET = 2, AF_INET6 = 10, SOCK_STREAM = 1, SOCK_CLOEXEC = 02000000 };
enum { SOL_SOCKET = 1, SO_REUSEADDR = 2, SCM_RIGHTS = 1 };
#define MSG_CMSG_CLOEXEC 0x40000000
enum { TIOCSTI = 0x5412, TIOCLINUX = 0x541c };
/* CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (not NEWTIME: in clone()'s
 * flags that bit is part of the exit signal). */
#define CLONE_NAMESPACES 0x7e020000U

/* Landlock, from <linux/landlock.h>. */
enum { LANDLOCK_CREATE_RULESET_VERSION = 1, LANDLOCK_RULE_PATH_BENEATH = 1 };
#define FS_EXECUTE (1ULL << 0)
#define FS_WRITE_FILE (1ULL << 1)
#define FS_READ_FILE (1ULL << 2)
#define FS_READ_DIR (1ULL << 3)
#define FS_REMOVE_DIR (1ULL << 4)
#define FS_REMOVE_FILE (1ULL << 5)
#define FS_MAKE_CHAR (1ULL << 6)
#define FS_MAKE_DIR (1ULL << 7)
#define FS_MAKE_REG (1ULL << 8)
#define FS_MAKE_SOCK (1ULL << 9)
#define FS_MAKE_FIFO (1ULL << 10)
#define FS_MAKE_BLOCK (1ULL << 11)
#define FS_MAKE_SYM (1ULL << 12)
#define FS_REFER (1ULL << 13)    /* ABI 2 */
#define FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#define FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#define NET_BIND_TCP (1ULL << 0)
#define NET_CONNECT_TCP (1ULL << 1)
#define SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0)
#define SCOPE_SIGNAL (1ULL << 1)

struct ruleset_attr { u64 handled_access_fs, handled_access_net, scoped; };
struct path_beneath_attr { u64 allowed_access; int parent_fd; } __attribute__((packed));

/* Classic BPF and seccomp, from <linux/filter.h> and <linux/seccomp.h>. */
struct sock_filter { u16 code; u8 jt, jf; u32 k; };
struct sock_fprog { u16 len; struct sock_filter *filter; };
enum { BPF_LD_W_ABS = 0x20, BPF_JEQ_K = 0x15, BPF_JGE_K = 0x35, BPF_JSET_K = 0x45, BPF_RET_K = 0x06 };
#define SECCOMP_RET_KILL_PROCESS 0x80000000U
#define SECCOMP_RET_ERRNO 0x00050000U
#define SECCOMP_RET_ALLOW 0x7fff0000U
enum { DATA_NR = 0, DATA_ARCH = 4, DATA_ARG0_LOW = 16, DATA_ARG1_LOW = 24 };
#define DATA_ARG_LOW(n) (16 + 8 * (n))
/* S_ISUID | S_ISGID: the mode bits that make a file run with its owner's or group's ids. */
#define SET_ID_BITS 06000U
/* O_CREAT | __O_TMPFILE (the same bits on x86_64 and aarch64): the open calls that create. */
#define OPEN_CREATES 020000100U

struct iovec { void *base; size_t len; };
struct msghdr {
    void *name; u32 namelen; struct iovec *iov; size_t iovlen; void *control; size_t controllen;
    int flags;
};
struct rights_message { size_t len; int level, type, fd; int pad; };
struct sockaddr_in { u16 family; u16 port; u32 addr; u8 zero[8]; };

static size_t length(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static void say(const char *a, const char *b, const char *c) {
    sys3(SYS_write, 2, a, length(a));
    sys3(SYS_write, 2, b, length(b));
    sys3(SYS_write, 2, c, length(c));
}

static __attribute__((noreturn)) void leave(int code) {
    for (;;) sys1(SYS_exit_group, code);
}

static __attribute__((noreturn)) void refuse(const char *what, const char *detail) {
    say("codecoder-confine: ", what, detail);
    sys3(SYS_write, 2, "\n", 1);
    leave(125);
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
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

static int number(const char *s, unsigned *out) {
    unsigned long value = 0;
    if (!*s) return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        value = value * 10 + (unsigned long)(*s - '0');
        if (value > 0xffffUL * 0x10000UL) return -1;
    }
    *out = (unsigned)value;
    return 0;
}

/* -- Landlock ------------------------------------------------------------------------------ */

static u64 handled_fs(long abi) {
    u64 rights = (1ULL << 13) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */
    if (abi >= 2) rights |= FS_REFER;
    if (abi >= 3) rights |= FS_TRUNCATE;
    if (abi >= 5) rights |= FS_IOCTL_DEV;
    return rights;
}

/* The rights that apply to a file (a rule for a file may hold no other). */
#define FILE_RIGHTS (FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV)
enum { S_IFMT = 0170000, S_IFDIR = 0040000 };

static int is_directory(long fd) {
    /* struct stat's st_mode: at byte 24 on x86_64, 16 on aarch64. */
    u32 status[36];
#if defined(__x86_64__)
    enum { MODE_WORD = 6 };
#else
    enum { MODE_WORD = 4 };
#endif
    if (sys2(SYS_fstat, fd, status)) return 1;
    return (status[MODE_WORD] & S_IFMT) == S_IFDIR;
}

static void add_rule(int ruleset, const char *path, u64 access) {
    long fd = sys4(SYS_openat, AT_FDCWD, path, O_PATH | O_CLOEXEC, 0);
    if (fd < 0) refuse("cannot open ", path);
    if (!is_directory(fd)) access &= FILE_RIGHTS;
    struct path_beneath_attr rule = {access, (int)fd};
    long added = sys4(SYS_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &rule, 0);
    sys1(SYS_close, fd);
    if (added) refuse("the kernel refused a Landlock rule for ", path);
}

/* Returns 1 once this process is restricted, 0 where the kernel has no Landlock. */
static int landlock(char **writes, int nwrites, char **files, int nfiles, char **reads,
                    int nreads, int no_tcp, int required) {
    long abi = sys3(SYS_landlock_create_ruleset, 0, 0, LANDLOCK_CREATE_RULESET_VERSION);
    if (abi < 1) {
        if (required) refuse("this kernel has no Landlock", "");
        return 0;
    }
    u64 all = handled_fs(abi);
    u64 read = FS_READ_FILE | FS_READ_DIR;
    u64 write = all & ~(FS_EXECUTE | read);
    struct ruleset_attr attr = {nreads ? write | read : write, 0, 0};
    size_t size = 8;
    if (abi >= 4) {
        size = 16;
        if (no_tcp) attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP;
    }
    if (abi >= 6) {
        size = 24;
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL;
    }
    long ruleset = sys3(SYS_landlock_create_ruleset, &attr, size, 0);
    if (ruleset < 0) refuse("cannot create a Landlock ruleset", "");
    for (int i = 0; i < nwrites; i++) add_rule((int)ruleset, writes[i], attr.handled_access_fs);
    for (int i = 0; i < nreads; i++) add_rule((int)ruleset, reads[i], read);
    /* A file takes only the rights that apply to files. */
    u64 file = FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
    for (int i = 0; i < nfiles; i++) add_rule((int)ruleset, files[i], file & attr.handled_access_fs);
    if (sys2(SYS_landlock_restrict_self, ruleset, 0)) refuse("landlock_restrict_self failed", "");
    sys1(SYS_close, ruleset);
    return 1;
}

/* -- seccomp ------------------------------------------------------------------------------- */

static const unsigned refused_calls[] = {
    SYS_ptrace, SYS_process_vm_readv, SYS_process_vm_writev, SYS_pidfd_getfd,
    SYS_keyctl, SYS_add_key, SYS_request_key,
    SYS_mount, SYS_umount2, SYS_pivot_root, SYS_open_tree, SYS_move_mount, SYS_fsopen,
    SYS_fsconfig, SYS_fsmount, SYS_fspick, SYS_mount_setattr,
    SYS_unshare, SYS_setns,
    SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
    SYS_bpf, SYS_perf_event_open, SYS_userfaultfd,
    SYS_name_to_handle_at, SYS_open_by_handle_at,
    SYS_init_module, SYS_finit_module, SYS_delete_module, SYS_kexec_load, SYS_kexec_file_load,
    SYS_swapon, SYS_swapoff, SYS_reboot, SYS_acct, SYS_syslog,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static struct sock_filter program[96 + 2 * COUNT(refused_calls)];
static unsigned emitted;

static void emit(u16 code, u8 jt, u8 jf, u32 k) {
    struct sock_filter op = {code, jt, jf, k};
    program[emitted++] = op;
}

static int traces(unsigned call) {
    return call == SYS_ptrace || call == SYS_process_vm_readv || call == SYS_process_vm_writev;
}

/* `nr` with S_ISUID or S_ISGID in its argument `mode`: EPERM; `nr` otherwise: allowed. */
static void set_id_mode(u32 nr, u32 mode) {
    emit(BPF_JEQ_K, 0, 4, nr);
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARG_LOW(mode));
    emit(BPF_JSET_K, 0, 1, SET_ID_BITS);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
}

/* The same for an open call, whose mode counts only when its flags create a file. */
static void set_id_open(u32 nr, u32 flags, u32 mode) {
    emit(BPF_JEQ_K, 0, 6, nr);
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARG_LOW(flags));
    emit(BPF_JSET_K, 0, 3, OPEN_CREATES);
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARG_LOW(mode));
    emit(BPF_JSET_K, 0, 1, SET_ID_BITS);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
}

static void seccomp(int no_inet, int ptrace) {
    u32 eperm = SECCOMP_RET_ERRNO | EPERM;
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARCH);
    emit(BPF_JEQ_K, 1, 0, AUDIT_ARCH_NATIVE);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS);
    emit(BPF_LD_W_ABS, 0, 0, DATA_NR);
#if defined(__x86_64__)
    emit(BPF_JGE_K, 0, 1, 0x40000000U); /* the x32 ABI, and numbers no system call has */
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS);
#endif
    for (unsigned i = 0; i < COUNT(refused_calls); i++) {
        if (ptrace && traces(refused_calls[i])) continue;
        emit(BPF_JEQ_K, 0, 1, refused_calls[i]);
        emit(BPF_RET_K, 0, 0, eperm);
    }
    emit(BPF_JEQ_K, 0, 1, SYS_clone3);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS);
    /* openat2 takes its mode in a structure the filter cannot read: ENOSYS, as on kernels
     * before 5.6, so that callers fall back to openat. */
    emit(BPF_JEQ_K, 0, 1, SYS_openat2);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS);
    /* No set-uid or set-gid bit on anything the command makes or changes (bubblewrap's nosuid
     * and no_new_privs only protect the inside; the host would run such a file with the owner's
     * ids afterwards): refused where the mode is given. Each block ends in a return. */
    set_id_mode(SYS_fchmod, 1);
    set_id_mode(SYS_fchmodat, 2);
    set_id_mode(SYS_fchmodat2, 2);
    set_id_mode(SYS_mknodat, 2);
    set_id_open(SYS_openat, 2, 3);
#if HAS_LEGACY_FILE_CALLS
    set_id_mode(SYS_chmod, 1);
    set_id_mode(SYS_creat, 1);
    set_id_mode(SYS_mknod, 1);
    set_id_open(SYS_open, 1, 2);
#endif
    /* Each block below ends in a return, so nothing after it needs the number again. */
    /* socket(): the families refused, then allow, then refuse (each check jumps there). */
    u32 families[3] = {AF_UNIX, AF_INET, AF_INET6};
    u8 checks = no_inet ? 3 : 1;
    emit(BPF_JEQ_K, 0, (u8)(checks + 3), SYS_socket);
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARG0_LOW);
    for (u8 c = 0; c < checks; c++) emit(BPF_JEQ_K, (u8)(checks - c), 0, families[c]);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
    emit(BPF_RET_K, 0, 0, eperm);
    emit(BPF_JEQ_K, 0, 5, SYS_ioctl);
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARG1_LOW);
    emit(BPF_JEQ_K, 1, 0, TIOCSTI);
    emit(BPF_JEQ_K, 0, 1, TIOCLINUX);
    emit(BPF_RET_K, 0, 0, eperm);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
    emit(BPF_JEQ_K, 0, 4, SYS_clone);
    emit(BPF_LD_W_ABS, 0, 0, DATA_ARG0_LOW);
    emit(BPF_JSET_K, 0, 1, CLONE_NAMESPACES);
    emit(BPF_RET_K, 0, 0, eperm);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
    emit(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW);
    if (emitted > COUNT(program)) refuse("the seccomp program does not fit", "");
    struct sock_fprog prog = {(u16)emitted, program};
    if (sys3(SYS_prctl, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
        refuse("cannot install the seccomp filter", "");
}

/* -- the egress listener ------------------------------------------------------------------- */

static void hand_over_listener(unsigned port, unsigned channel) {
    long sock = sys3(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (sock < 0) refuse("cannot create the egress listener", "");
    int one = 1;
    sys5(SYS_setsockopt, sock, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {AF_INET, (u16)((port >> 8) | ((port & 0xff) << 8)),
                                  0x0100007fU /* 127.0.0.1 */, {0}};
    if (sys3(SYS_bind, sock, &address, sizeof address) || sys2(SYS_listen, sock, 64))
        refuse("cannot listen for the egress relay", "");
    char byte = 'L';
    struct iovec iov = {&byte, 1};
    struct rights_message rights = {sizeof(size_t) + 2 * sizeof(int) + sizeof(int), SOL_SOCKET,
                                    SCM_RIGHTS, (int)sock, 0};
    struct msghdr message = {0, 0, &iov, 1, &rights, sizeof rights, 0};
    if (sys3(SYS_sendmsg, channel, &message, 0) != 1)
        refuse("cannot hand the egress listener to the runtime", "");
    sys1(SYS_close, sock);
    sys1(SYS_close, channel);
}

/* -- the request of a warm sandbox -------------------------------------------------------- */

#define REQUEST_MAGIC 0x51524343U
#define REQUEST_BYTES (2UL << 20)
#define REQUEST_ITEMS 65536

struct request_header { u32 magic, length, argc, envc; };
struct request_rights { size_t len; int level, type, fds[3]; int pad; };

static char request_data[REQUEST_BYTES];
static char *request_args[REQUEST_ITEMS + 2];

/* Wait for the request on `channel`, make its descriptors 0, 1 and 2 and its directory the
 * working one; returns its arguments and sets *envp to its environment. */
static char **receive_request(unsigned channel, char ***envp) {
    struct request_header header;
    struct iovec iov = {&header, sizeof header};
    struct request_rights rights;
    struct msghdr message = {0, 0, &iov, 1, &rights, sizeof rights, 0};
    long got = sys3(SYS_recvmsg, channel, &message, MSG_CMSG_CLOEXEC);
    if (got == 0) leave(125); /* the runtime discarded this sandbox */
    if (got != (long)sizeof header || message.controllen < 28 || rights.len != 28 ||
        rights.level != SOL_SOCKET || rights.type != SCM_RIGHTS || (message.flags & 0x8))
        refuse("malformed request", "");
    if (header.magic != REQUEST_MAGIC || header.length > REQUEST_BYTES ||
        (u64)header.argc + header.envc > REQUEST_ITEMS || header.argc == 0)
        refuse("malformed request header", "");
    for (u32 done = 0; done < header.length;) {
        long n = sys3(SYS_read, channel, request_data + done, header.length - done);
        if (n <= 0) refuse("the request ended early", "");
        done += (u32)n;
    }
    /* The working directory, the arguments, the environment: exactly that many strings. */
    u32 wanted = 1 + header.argc + header.envc, found = 0, at = 0;
    char *cwd = request_data;
    while (at < header.length && found < wanted) {
        if (found) request_args[found - 1 + (found > header.argc)] = request_data + at;
        else cwd = request_data + at;
        while (at < header.length && request_data[at]) at++;
        if (at == header.length) refuse("the request holds an unterminated string", "");
        at++, found++;
    }
    if (found != wanted || at != header.length) refuse("the request holds the wrong count", "");
    request_args[header.argc] = 0;
    request_args[header.argc + 1 + header.envc] = 0;
    for (int i = 0; i < 3; i++)
        if (rights.fds[i] != i && sys3(SYS_dup3, rights.fds[i], i, 0) != i)
            refuse("cannot take the request's standard streams", "");
    if (sys1(SYS_chdir, cwd)) refuse("cannot enter the working directory ", cwd);
    *envp = request_args + header.argc + 1;
    return request_args;
}

/* -- running the program ------------------------------------------------------------------- */

static __attribute__((noreturn)) void failed(const char *program, long error) {
    say(program,
        error == -EACCES                       ? ": permission denied\n"
        : error == -ENOENT || error == -ENOTDIR ? ": command not found\n"
                                                : ": cannot be executed\n",
        "");
    leave(error == -ENOENT || error == -ENOTDIR ? 127 : 126);
}

static __attribute__((noreturn)) void run(char **args, char **envp) {
    char *program = args[0];
    if (contains_slash(program)) failed(program, sys3(SYS_execve, program, args, envp));
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
            error = sys3(SYS_execve, candidate, args, envp);
            if (error != -ENOENT && error != -ENOTDIR && !kept) kept = error;
        }
        if (!*end) break;
        p = end;
    }
    failed(program, kept ? kept : error);
}

#define MAX_DIRS 4096

/* No capability, whoever runs this (root, for @confined): what the command reads, it reads
 * as its owner, its group or any account would, never through CAP_DAC_OVERRIDE and the like.
 * Inside bubblewrap the sets are empty already and the bounding set cannot be changed. */
static void drop_capabilities(void) {
    for (long cap = 0; cap < 64; cap++) sys2(SYS_prctl, PR_CAPBSET_DROP, cap);
    sys5(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    struct { u32 version; int pid; } header = {CAPABILITY_VERSION_3, 0};
    struct { u32 effective, permitted, inheritable; } data[2] = {{0, 0, 0}, {0, 0, 0}};
    if (sys2(SYS_capset, &header, data)) refuse("cannot drop capabilities", "");
}

__attribute__((used)) void start(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    static char *writes[MAX_DIRS], *files[MAX_DIRS], *reads[MAX_DIRS];
    int nwrites = 0, nfiles = 0, nreads = 0, no_tcp = 0, no_inet = 0, required = 0, ptrace = 0;
    unsigned port = 0, channel = 0, ready = 0, request = 0;
    int listen = 0;
    long i = 1;
    for (; i < argc && !same(argv[i], "--"); i++) {
        if (same(argv[i], "--write") && i + 1 < argc && nwrites < MAX_DIRS) {
            writes[nwrites++] = argv[++i];
        } else if (same(argv[i], "--write-file") && i + 1 < argc && nfiles < MAX_DIRS) {
            files[nfiles++] = argv[++i];
        } else if (same(argv[i], "--read") && i + 1 < argc && nreads < MAX_DIRS) {
            reads[nreads++] = argv[++i];
        } else if (same(argv[i], "--no-tcp")) {
            no_tcp = 1;
        } else if (same(argv[i], "--no-inet")) {
            no_inet = 1;
        } else if (same(argv[i], "--ready") && i + 1 < argc && !number(argv[i + 1], &ready) &&
                   ready > 2) {
            i++;
        } else if (same(argv[i], "--request") && i + 1 < argc &&
                   !number(argv[i + 1], &request) && request > 2) {
            i++;
        } else if (same(argv[i], "--require-landlock")) {
            required = 1;
        } else if (same(argv[i], "--ptrace")) {
            ptrace = 1;
        } else if (same(argv[i], "--listen") && i + 2 < argc && !number(argv[i + 1], &port) &&
                   !number(argv[i + 2], &channel) && port && port < 65536 && channel > 2) {
            listen = 1;
            i += 2;
        } else {
            refuse("unknown option or too many directories: ", argv[i]);
        }
    }
    if (i + 1 >= argc) refuse("usage: confine [OPTIONS] -- PROGRAM [ARGS...]", "");
    if (sys5(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) refuse("cannot set no_new_privs", "");
    if (listen) hand_over_listener(port, channel);
    drop_capabilities();
    int confined = landlock(writes, nwrites, files, nfiles, reads, nreads, no_tcp, required);
    seccomp(no_inet, ptrace && confined);
    if (ready && sys3(SYS_write, ready, "r", 1) != 1) refuse("cannot say it is ready", "");
    char **program = argv + i + 1;
    if (request) program = receive_request(request, &envp);
    if (sys3(SYS_close_range, 3, ~0U, 0)) refuse("cannot close inherited descriptors", "");
    run(program, envp);
}
