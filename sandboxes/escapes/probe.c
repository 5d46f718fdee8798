/*
 * probe: the WASI module that `codecoder audit` runs to attack the @wasm sandbox from inside.
 *
 * Usage: probe OP ARGS...   (argv[0] is the program name; paths are guest paths)
 *
 *   read PATH           print the file's content                 exit 1 if it cannot be read
 *   write PATH TEXT     create or truncate PATH, write TEXT      exit 1 if it cannot be written
 *   mkdirs PATH         create PATH and its missing parents      exit 1 if the last one fails
 *   symlink TARGET LINK create LINK pointing at TARGET           exit 1 if it cannot
 *   environ             print "count N", then every variable
 *   sockets             sock_accept on every descriptor 0..1023, print "accepted N"
 *   loop                spin for ever
 *   sleep SECONDS       sleep in the host (poll_oneoff), then print "slept"
 *   grow BYTES          allocate and touch BYTES of memory, 1 MiB at a time; trap if refused
 *   flood BYTES         write BYTES to stdout
 *   exit CODE           proc_exit(CODE)
 *   reads PATH COUNT    read PATH COUNT times, print each content that differs from the last
 *   writes PATH COUNT   open PATH for writing (creating it) COUNT times, print "opened N"
 *   rename FROM TO      rename FROM to TO                        exit 1 if it cannot
 *   fill PATH BYTES     write BYTES to PATH, 64 KiB at a time    exit 1 when a write fails
 *   hole PATH BYTES     create PATH and set its size to BYTES (a sparse file: one hole)
 *   far PATH OFFSET     create PATH and write one byte at OFFSET (a hole before it)
 *   links FROM TO COUNT create COUNT hard links TOn to FROM, print "linked N"
 *
 * Each operation is one attack the runner observes from outside (a marker in the output, a file
 * on the host, an error, the time it took); the probe itself decides nothing. Errors go to
 * stderr as "OP PATH: strerror".
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <wasi/api.h>

extern char **environ;

/* Written by `grow`: volatile and global, so the compiler cannot elide the allocations. */
char *volatile grown;

static int fail(const char *op, const char *path) {
    fprintf(stderr, "%s %s: %s\n", op, path, strerror(errno));
    return 1;
}

static int read_into(const char *path, char *buf, size_t size, size_t *length) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    size_t used = 0;
    for (;;) {
        ssize_t n = read(fd, buf + used, size - used);
        if (n < 0) {
            close(fd);
            return -1;
        }
        if (n == 0 || (used += (size_t)n) == size) break;
    }
    close(fd);
    *length = used;
    return 0;
}

static int op_read(const char *path) {
    static char buf[1 << 20];
    size_t length;
    if (read_into(path, buf, sizeof buf, &length) < 0) return fail("read", path);
    fwrite(buf, 1, length, stdout);
    return 0;
}

static int op_write(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail("write", path);
    size_t length = strlen(text);
    if (write(fd, text, length) != (ssize_t)length) {
        close(fd);
        return fail("write", path);
    }
    close(fd);
    printf("wrote %s\n", path);
    return 0;
}

static int op_mkdirs(const char *path) {
    char copy[4096];
    size_t length = strlen(path);
    if (length >= sizeof copy) return 2;
    memcpy(copy, path, length + 1);
    for (char *p = copy + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        mkdir(copy, 0755);  /* parents may exist already; only the last mkdir decides */
        *p = '/';
    }
    if (mkdir(copy, 0755) < 0) return fail("mkdirs", path);
    printf("created %s\n", path);
    return 0;
}

static int op_symlink(const char *target, const char *link) {
    if (symlink(target, link) < 0) return fail("symlink", link);
    printf("linked %s\n", link);
    return 0;
}

static int op_environ(void) {
    int count = 0;
    for (char **v = environ; v && *v; v++) count++;
    printf("count %d\n", count);
    for (char **v = environ; v && *v; v++) printf("%s\n", *v);
    return 0;
}

static int op_sockets(void) {
    int accepted = 0;
    for (__wasi_fd_t fd = 0; fd < 1024; fd++) {
        __wasi_fd_t connection;
        if (__wasi_sock_accept(fd, 0, &connection) == 0) {
            printf("accepted a connection on descriptor %u\n", (unsigned)fd);
            accepted++;
        }
    }
    printf("accepted %d\n", accepted);
    return 0;
}

static int op_loop(void) {
    volatile unsigned long spins = 0;
    for (;;) spins++;
}

static int op_sleep(const char *seconds) {
    struct timespec duration = {.tv_sec = atol(seconds), .tv_nsec = 0};
    nanosleep(&duration, NULL);
    printf("slept\n");
    return 0;
}

static int op_grow(const char *bytes) {
    unsigned long long target = strtoull(bytes, NULL, 10), total = 0;
    while (total < target) {
        char *chunk = malloc(1 << 20);
        if (!chunk) __builtin_trap();  /* refused: end the way a real program would */
        memset(chunk, 1, 1 << 20);
        grown = chunk;
        total += 1 << 20;
    }
    printf("grew %llu\n", total);
    return 0;
}

static int op_flood(const char *bytes) {
    static char buf[1 << 16];
    memset(buf, 'x', sizeof buf);
    unsigned long long left = strtoull(bytes, NULL, 10);
    while (left > 0) {
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (write(1, buf, n) < 0) return fail("flood", "stdout");
        left -= n;
    }
    return 0;
}

static int op_reads(const char *path, const char *count) {
    static char buf[4096], last[4096];
    size_t last_length = (size_t)-1;
    for (long i = atol(count); i > 0; i--) {
        size_t length;
        if (read_into(path, buf, sizeof buf, &length) < 0) continue;
        if (length == last_length && memcmp(buf, last, length) == 0) continue;
        printf("read: %.*s\n", (int)length, buf);
        memcpy(last, buf, length);
        last_length = length;
    }
    return 0;
}

static int op_writes(const char *path, const char *count) {
    long opened = 0;
    for (long i = atol(count); i > 0; i--) {
        int fd = open(path, O_WRONLY | O_CREAT, 0644);
        if (fd < 0) continue;
        opened++;
        close(fd);
    }
    printf("opened %ld\n", opened);
    return 0;
}

static int op_rename(const char *from, const char *to) {
    if (rename(from, to) < 0) return fail("rename", to);
    printf("renamed %s\n", to);
    return 0;
}

static int op_fill(const char *path, const char *bytes) {
    static char buf[1 << 16];
    memset(buf, 'x', sizeof buf);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return fail("fill", path);
    unsigned long long left = strtoull(bytes, NULL, 10);
    while (left > 0) {
        size_t n = left < sizeof buf ? (size_t)left : sizeof buf;
        if (write(fd, buf, n) != (ssize_t)n) {
            close(fd);
            return fail("fill", path);
        }
        left -= n;
    }
    close(fd);
    printf("filled %s\n", path);
    return 0;
}

static int op_hole(const char *path, const char *bytes) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)strtoull(bytes, NULL, 10)) != 0) return fail("hole", path);
    close(fd);
    printf("made %s\n", path);
    return 0;
}

static int op_far(const char *path, const char *offset) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || pwrite(fd, "x", 1, (off_t)strtoull(offset, NULL, 10)) != 1) return fail("far", path);
    close(fd);
    printf("made %s\n", path);
    return 0;
}

static int op_links(const char *from, const char *to, const char *count) {
    static char name[4096];
    int made = 0;
    for (int i = 0; i < atoi(count); i++) {
        snprintf(name, sizeof name, "%s%d", to, i);
        if (link(from, name) != 0) {
            fail("links", name);
            break;
        }
        made++;
    }
    printf("linked %d\n", made);
    return made ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *op = argv[1];
    if (!strcmp(op, "read") && argc == 3) return op_read(argv[2]);
    if (!strcmp(op, "write") && argc == 4) return op_write(argv[2], argv[3]);
    if (!strcmp(op, "mkdirs") && argc == 3) return op_mkdirs(argv[2]);
    if (!strcmp(op, "symlink") && argc == 4) return op_symlink(argv[2], argv[3]);
    if (!strcmp(op, "environ") && argc == 2) return op_environ();
    if (!strcmp(op, "sockets") && argc == 2) return op_sockets();
    if (!strcmp(op, "loop") && argc == 2) return op_loop();
    if (!strcmp(op, "sleep") && argc == 3) return op_sleep(argv[2]);
    if (!strcmp(op, "grow") && argc == 3) return op_grow(argv[2]);
    if (!strcmp(op, "flood") && argc == 3) return op_flood(argv[2]);
    if (!strcmp(op, "exit") && argc == 3) exit(atoi(argv[2]));
    if (!strcmp(op, "reads") && argc == 4) return op_reads(argv[2], argv[3]);
    if (!strcmp(op, "writes") && argc == 4) return op_writes(argv[2], argv[3]);
    if (!strcmp(op, "rename") && argc == 4) return op_rename(argv[2], argv[3]);
    if (!strcmp(op, "fill") && argc == 4) return op_fill(argv[2], argv[3]);
    if (!strcmp(op, "hole") && argc == 4) return op_hole(argv[2], argv[3]);
    if (!strcmp(op, "far") && argc == 4) return op_far(argv[2], argv[3]);
    if (!strcmp(op, "links") && argc == 5) return op_links(argv[2], argv[3], argv[4]);
    fprintf(stderr, "probe: unknown operation or wrong arguments: %s\n", op);
    return 2;
}
