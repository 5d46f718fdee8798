/*
 * fileops: filesystem operations inside WASI-preopened directories, and nothing else.
 *
 * The host (runtime/tools/files.py) preopens only the directories a call needs, read-only
 * unless the call writes. Confinement is WASI's: every path below is resolved by the runtime
 * against a preopened directory, so `..` and symlinks cannot lead out of it. Reads add no path
 * checks of their own beyond refusing non-regular files (opening a FIFO would block the host);
 * changes add the symlink and hard-link rules below.
 *
 * Usage: fileops OP ARGS...   (argv[0] is the program name; paths are guest paths)
 *
 *   read  PATH OFFSET LIMIT      {"size":S,"offset":O,"length":L}\n then L raw bytes
 *   cat   ROOT LIMIT BUDGET      stdin: NUL-separated paths relative to ROOT; per path either
 *                                {"path":P,"size":S,"length":L}\n then L raw bytes, or
 *                                {"path":P,"size":S,"skipped":true}\n (larger than LIMIT), or
 *                                {"path":P,"errno":E,"error":M}\n; it stops before the first
 *                                file that would take the bytes sent past BUDGET (the first
 *                                file is always sent): the caller asks again for the rest
 *   write PATH [--parents]       stdin -> PATH (created or truncated);
 *                                {"written":N,"created":true|false}\n
 *   list  PATH                   one {"name":N,"type":T,"size":S[,"target":X]}\n per entry
 *   walk  PATH MAXENTRIES [--no-size]
 *                                one {"path":P,"type":T,"size":S[,"target":X]}\n per entry,
 *                                recursively, never following symlinks; {"truncated":true}\n
 *                                last if MAXENTRIES was reached. --no-size: no "size", and no
 *                                stat per entry (types come from the directory listing)
 *   stat  PATH                   {"type":T,"size":S,"mtime_ns":M[,"target":X]}\n (no follow)
 *   move  SRC DST [--parents] [--overwrite]   {"moved":true}\n
 *   delete PATH                  a file, a symlink or an empty directory; {"deleted":true}\n
 *
 * write, move and delete never follow a symlink in any component of their paths (see
 * open_parent), and write refuses a file with several hard links.
 *
 * Strings are JSON strings when they are valid UTF-8; otherwise the key gets a `_hex` suffix
 * and the value is the bytes in hex (`"name_hex":"ff00"`), so no name is ever mangled.
 * T is one of file, dir, symlink, other.
 *
 * Exit status: 0 success; 1 the operation failed, with one JSON line on stderr
 * {"errno":"ENOENT","error":"no such file or directory","path":P}; 2 usage error.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <wasi/libc-find-relpath.h>

#define MAX_DEPTH 256
#define CHUNK (64 * 1024)

static char stdout_buffer[CHUNK];

/* ---- JSON output ---------------------------------------------------------------------- */

static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + len > n) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        /* overlong forms, UTF-16 surrogates and code points past U+10FFFF are not UTF-8 */
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return 0;
        i += len;
    }
    return 1;
}

/* Writes `"key":"value"` (or `"key_hex":"..."` for bytes that are not UTF-8). */
static void put_string(FILE *f, const char *key, const char *value) {
    const unsigned char *s = (const unsigned char *)value;
    size_t n = strlen(value);
    if (!valid_utf8(s, n)) {
        fprintf(f, "\"%s_hex\":\"", key);
        for (size_t i = 0; i < n; i++) fprintf(f, "%02x", s[i]);
        fputc('"', f);
        return;
    }
    fprintf(f, "\"%s\":\"", key);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc(c, f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

static const char *type_name(mode_t mode) {
    if (S_ISREG(mode)) return "file";
    if (S_ISDIR(mode)) return "dir";
    if (S_ISLNK(mode)) return "symlink";
    return "other";
}

/* ---- errors --------------------------------------------------------------------------- */

static const char *errno_name(int err) {
    switch (err) {
    case ENOENT: return "ENOENT";
    case ENOTCAPABLE: return "ENOTCAPABLE";
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case EROFS: return "EROFS";
    case EISDIR: return "EISDIR";
    case ENOTDIR: return "ENOTDIR";
    case EEXIST: return "EEXIST";
    case ENOTEMPTY: return "ENOTEMPTY";
    case ELOOP: return "ELOOP";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOSPC: return "ENOSPC";
    case EXDEV: return "EXDEV";
    case EINVAL: return "EINVAL";
    case EBADF: return "EBADF";
    case EAGAIN: return "EAGAIN";
    case ENOMEM: return "ENOMEM";
    case EFBIG: return "EFBIG";
    case EMLINK: return "EMLINK";
    case EIO: return "EIO";
    case EBUSY: return "EBUSY";
    case ENOTSUP: return "ENOTSUP";
    default: return "EOTHER";
    }
}

static const char *errno_text(int err) {
    switch (err) {
    case ENOENT: return "no such file or directory";
    /* WASI reports every attempt to leave a preopened directory (`..`, an absolute path that
       is not preopened, a symlink pointing out) as ENOTCAPABLE or EPERM. */
    case ENOTCAPABLE: return "outside the workspace, or not permitted by the sandbox";
    case EPERM: return "not permitted (outside the workspace, or read-only)";
    case EACCES: return "permission denied";
    case EROFS: return "read-only";
    case EISDIR: return "is a directory";
    case ENOTDIR: return "not a directory";
    case EEXIST: return "already exists";
    case ENOTEMPTY: return "directory not empty";
    case ELOOP:
        return "a symbolic link is in the way (changes never follow links; links may not loop)";
    case ENAMETOOLONG: return "name too long";
    case ENOSPC: return "no space left on device";
    case EXDEV: return "cannot move across directories that are mounted separately";
    case EINVAL: return "invalid argument";
    case EAGAIN: return "not a regular file (would block)";
    case ENOMEM: return "out of memory";
    case EFBIG: return "file too large";
    default: return strerror(err);
    }
}

static void put_error_fields(FILE *f, int err) {
    fprintf(f, "\"errno\":\"%s\",", errno_name(err));
    put_string(f, "error", errno_text(err));
}

static int fail(const char *path, int err) {
    fputc('{', stderr);
    put_error_fields(stderr, err);
    fputc(',', stderr);
    put_string(stderr, "path", path);
    fputs("}\n", stderr);
    return 1;
}

static int fail_message(const char *path, const char *code, const char *message) {
    fprintf(stderr, "{\"errno\":\"%s\",", code);
    put_string(stderr, "error", message);
    fputc(',', stderr);
    put_string(stderr, "path", path);
    fputs("}\n", stderr);
    return 1;
}

static int usage(void) {
    fputs("{\"errno\":\"USAGE\",\"error\":\"usage: fileops read|cat|write|list|walk|stat|"
          "move|delete ARGS...\"}\n",
          stderr);
    return 2;
}

static int parse_size(const char *text, long long *out) {
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < 0) return 0;
    *out = value;
    return 1;
}

/* ---- reading -------------------------------------------------------------------------- */

#define SKIPPED (-1) /* read_regular: the file is larger than `skip_above` */
#define DEFERRED (-2) /* read_regular: the file does not fit in what is left of the budget */

/* Reads at most `limit` bytes from `offset` of a regular file into a new buffer. Returns 0, an
   errno value, SKIPPED or DEFERRED (`skip_above` and `budget` are ignored when negative).
   Files other than regular files are refused before and after opening, because opening a
   FIFO blocks the host thread (wasmtime ignores O_NONBLOCK there), where no deadline can
   interrupt it. */
static int read_regular(const char *path, long long offset, long long limit,
                        long long skip_above, long long budget, char **data, size_t *length,
                        long long *size) {
    struct stat st;
    if (stat(path, &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (!S_ISREG(st.st_mode)) return EAGAIN;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return errno;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int err = S_ISDIR(st.st_mode) ? EISDIR : EAGAIN;
        close(fd);
        return err;
    }
    *size = (long long)st.st_size;
    long long available = *size > offset ? *size - offset : 0;
    size_t want = (size_t)(available < limit ? available : limit);
    if (skip_above >= 0 && *size > skip_above) {
        close(fd);
        return SKIPPED;
    }
    if (budget >= 0 && (long long)want > budget) {
        close(fd);
        return DEFERRED;
    }
    char *buffer = malloc(want ? want : 1);
    if (buffer == NULL) {
        close(fd);
        return ENOMEM;
    }
    size_t got = 0;
    while (got < want) {
        ssize_t n = pread(fd, buffer + got, want - got, (off_t)(offset + (long long)got));
        if (n < 0) {
            int err = errno;
            free(buffer);
            close(fd);
            return err;
        }
        if (n == 0) break; /* the file shrank while we read it: report what is there */
        got += (size_t)n;
    }
    close(fd);
    *data = buffer;
    *length = got;
    return 0;
}

static int op_read(const char *path, const char *offset_text, const char *limit_text) {
    long long offset, limit, size = 0;
    if (!parse_size(offset_text, &offset) || !parse_size(limit_text, &limit)) return usage();
    char *data = NULL;
    size_t length = 0;
    int err = read_regular(path, offset, limit, -1, -1, &data, &length, &size);
    if (err) return fail(path, err);
    printf("{\"size\":%lld,\"offset\":%lld,\"length\":%zu}\n", size, offset, length);
    fwrite(data, 1, length, stdout);
    free(data);
    return 0;
}

static char *read_all_stdin(size_t *length) {
    size_t capacity = CHUNK, used = 0;
    char *buffer = malloc(capacity + 1);
    if (buffer == NULL) return NULL;
    for (;;) {
        if (used == capacity) {
            capacity *= 2;
            char *grown = realloc(buffer, capacity + 1);
            if (grown == NULL) {
                free(buffer);
                return NULL;
            }
            buffer = grown;
        }
        ssize_t n = read(0, buffer + used, capacity - used);
        if (n < 0) {
            free(buffer);
            return NULL;
        }
        if (n == 0) break;
        used += (size_t)n;
    }
    buffer[used] = '\0';
    *length = used;
    return buffer;
}

static int op_cat(const char *root, const char *limit_text, const char *budget_text) {
    long long limit, budget;
    if (!parse_size(limit_text, &limit) || !parse_size(budget_text, &budget)) return usage();
    size_t input_length = 0;
    char *input = read_all_stdin(&input_length);
    if (input == NULL) return fail("<stdin>", ENOMEM);
    size_t root_length = strlen(root);
    char *start = input;
    char *end = input + input_length;
    int first = 1;
    while (start < end) {
        char *stop = memchr(start, '\0', (size_t)(end - start));
        if (stop == NULL) stop = end;
        size_t rel_length = (size_t)(stop - start);
        if (rel_length > 0) {
            /* `start` is NUL-terminated: by the separator, or by read_all_stdin at the end */
            const char *rel = start;
            char *path = malloc(root_length + rel_length + 2);
            if (path == NULL) {
                free(input);
                return fail(root, ENOMEM);
            }
            memcpy(path, root, root_length);
            path[root_length] = '/';
            memcpy(path + root_length + 1, rel, rel_length + 1);
            char *data = NULL;
            size_t length = 0;
            long long size = 0;
            /* The first file is always read, so that every call makes progress. */
            int err = read_regular(path, 0, limit, limit, first ? -1 : budget, &data, &length,
                                   &size);
            free(path);
            if (err == DEFERRED) break; /* the caller asks again for the rest */
            first = 0;
            fputc('{', stdout);
            put_string(stdout, "path", rel);
            if (err == SKIPPED) {
                printf(",\"size\":%lld,\"skipped\":true}\n", size);
            } else if (err) {
                fputc(',', stdout);
                put_error_fields(stdout, err);
                fputs("}\n", stdout);
            } else {
                printf(",\"size\":%lld,\"length\":%zu}\n", size, length);
                fwrite(data, 1, length, stdout);
                free(data);
                budget = budget > (long long)length ? budget - (long long)length : 0;
            }
        }
        start = stop + 1;
    }
    free(input);
    return 0;
}

/* ---- writing -------------------------------------------------------------------------- */

/* Changes never follow symlinks, in any component: otherwise a link planted inside the
   workspace (src/x -> ../.git/hooks/pre-commit) would let a write granted for what is under
   src/ land on a protected path, which WASI (it only keeps us inside the preopen) allows.
   So the directory holding the last component is reached one component at a time from the
   preopened root with O_NOFOLLOW, and the change is made relative to that directory's
   descriptor: no path is resolved twice, so nothing can be swapped in between. */
struct parent {
    int fd;
    int owned; /* 0 while `fd` is the preopened directory itself, which must stay open */
    const char *name; /* the last component, inside `copy` */
    char *copy;
};

static void close_parent(struct parent *p) {
    if (p->owned && p->fd >= 0) close(p->fd);
    free(p->copy);
}

static int is_symlink_at(int dirfd, const char *name) {
    struct stat st;
    return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
}

/* `path` is absolute: the preopened directory it starts with is found as wasi-libc finds it
   (the longest matching prefix), then the rest is walked. Returns 0 or an errno value. */
static int open_parent(const char *path, int make, struct parent *out) {
    out->fd = -1;
    out->owned = 0;
    out->copy = NULL;
    const char *prefix = NULL, *relative = NULL;
    if (path[0] != '/') return EINVAL;
    int root = __wasilibc_find_abspath(path, &prefix, &relative);
    if (root < 0) return errno == ENOENT ? ENOTCAPABLE : errno;
    out->fd = root;
    out->copy = strdup(relative);
    if (out->copy == NULL) return ENOMEM;
    char *component = out->copy;
    for (;;) {
        while (*component == '/') component++;
        char *slash = strchr(component, '/');
        while (slash != NULL && slash[1] == '/') slash++; /* tolerate `a//b` */
        if (slash == NULL || slash[1] == '\0') {
            if (slash != NULL) *slash = '\0';
            break;
        }
        *slash = '\0';
        if (strcmp(component, "..") == 0) return EPERM;
        if (component[0] != '\0' && strcmp(component, ".") != 0) {
            int next = openat(out->fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
            if (next < 0 && errno == ENOENT && make) {
                if (mkdirat(out->fd, component, 0777) != 0 && errno != EEXIST) return errno;
                next = openat(out->fd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
            }
            if (next < 0) {
                int err = errno;
                return is_symlink_at(out->fd, component) ? ELOOP : err;
            }
            if (out->owned) close(out->fd);
            out->fd = next;
            out->owned = 1;
        }
        component = slash + 1;
    }
    /* the preopened directory itself, `.` or `..` cannot be written, moved or deleted */
    if (component[0] == '\0' || strcmp(component, ".") == 0 || strcmp(component, "..") == 0)
        return EINVAL;
    out->name = component;
    return 0;
}

/* Writes `length` bytes at `offset`, whole or not at all as far as the caller is concerned:
   returns 0 or an errno value (a short write on a full disk is ENOSPC). */
static int write_at(int fd, const char *data, size_t length, long long offset) {
    size_t done = 0;
    while (done < length) {
        ssize_t n = pwrite(fd, data + done, length - done, (off_t)(offset + (long long)done));
        if (n < 0) return errno;
        if (n == 0) return ENOSPC;
        done += (size_t)n;
    }
    return 0;
}

/* A write never loses what it replaces when the disk is full: the new content is read whole
   first, then what lies past the old end is written first (the room the new content needs is
   taken before any old byte is touched; if it cannot be, the file is cut back to its old length
   and is as it was), then the old bytes are overwritten (their blocks are the file's already)
   and what is left of them cut off. The file keeps its inode: its mode, owner and other
   attributes. A new file that cannot be written whole is removed. */
static int op_write(const char *path, int parents) {
    struct parent parent;
    int err = open_parent(path, parents, &parent);
    if (err) {
        close_parent(&parent);
        return fail(path, err);
    }
    struct stat st;
    int existed = fstatat(parent.fd, parent.name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (existed && !S_ISREG(st.st_mode)) {
        err = S_ISLNK(st.st_mode) ? ELOOP : S_ISDIR(st.st_mode) ? EISDIR : EAGAIN;
        close_parent(&parent);
        return fail(path, err);
    }
    size_t length = 0;
    char *data = read_all_stdin(&length);
    if (data == NULL) {
        close_parent(&parent);
        return fail("<stdin>", errno ? errno : ENOMEM);
    }
    /* Not O_TRUNC: the file is checked before anything in it is lost. O_EXCL for a new one, so
       that only a file this call created is removed when it fails. */
    int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | (existed ? 0 : O_EXCL);
    int fd = openat(parent.fd, parent.name, flags, 0666);
    if (fd < 0) {
        err = errno;
        free(data);
        close_parent(&parent);
        return fail(path, err);
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        free(data);
        close_parent(&parent);
        return fail(path, EAGAIN);
    }
    /* A second name for the file could be a protected one (.git/hooks/...): writing through
       a hard link would change it too. */
    if (st.st_nlink > 1) {
        close(fd);
        free(data);
        close_parent(&parent);
        return fail_message(path, "EMLINK",
                            "the file has other hard links; writing it would change them too");
    }
    long long old = (long long)st.st_size;
    long long size = (long long)length;
    err = size > old ? write_at(fd, data + old, (size_t)(size - old), old) : 0;
    if (err) {
        /* Nothing old was touched: give back the room taken, or the file made. */
        if (existed) {
            (void)ftruncate(fd, (off_t)old);
        } else {
            (void)unlinkat(parent.fd, parent.name, 0);
        }
        close(fd);
        free(data);
        close_parent(&parent);
        return fail(path, err);
    }
    err = write_at(fd, data, (size_t)(size < old ? size : old), 0);
    if (!err && size < old && ftruncate(fd, (off_t)size) != 0) err = errno;
    free(data);
    if (close(fd) != 0 && !err) err = errno;
    if (err && !existed) (void)unlinkat(parent.fd, parent.name, 0);
    close_parent(&parent);
    if (err) return fail(path, err);
    printf("{\"written\":%lld,\"created\":%s}\n", size, existed ? "false" : "true");
    return 0;
}

/* ---- listing -------------------------------------------------------------------------- */

static const char *dirent_type(unsigned char type) {
    switch (type) {
    case DT_REG: return "file";
    case DT_DIR: return "dir";
    case DT_LNK: return "symlink";
    default: return "other";
    }
}

static void put_link_target(int dirfd, const char *name) {
    char target[4096];
    ssize_t n = readlinkat(dirfd, name, target, sizeof target - 1);
    if (n >= 0) {
        target[n] = '\0';
        fputc(',', stdout);
        put_string(stdout, "target", target);
    }
}

/* Writes the fields every entry has: type, size, and a symlink's target (never followed). */
static void put_entry_fields(int dirfd, const char *name, const struct stat *st) {
    fprintf(stdout, ",\"type\":\"%s\",\"size\":%lld", type_name(st->st_mode),
            (long long)st->st_size);
    if (S_ISLNK(st->st_mode)) put_link_target(dirfd, name);
}

static int is_dot(const char *name) {
    return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

static int op_list(const char *path) {
    DIR *dir = opendir(path);
    if (dir == NULL) return fail(path, errno);
    int fd = dirfd(dir);
    struct dirent *entry;
    errno = 0;
    while ((entry = readdir(dir)) != NULL) {
        if (is_dot(entry->d_name)) continue;
        struct stat st;
        if (fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        fputc('{', stdout);
        put_string(stdout, "name", entry->d_name);
        put_entry_fields(fd, entry->d_name, &st);
        fputs("}\n", stdout);
        errno = 0;
    }
    int err = errno;
    closedir(dir);
    return err ? fail(path, err) : 0;
}

struct walk {
    long long remaining;
    int truncated;
    int sizes; /* 0: types from the directory entries, no stat per entry (much faster) */
};

/* `rel` is the path relative to the walk's root ("" for the root itself). */
static void walk_dir(int parent, const char *name, const char *rel, int depth, struct walk *w) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    DIR *dir = fd < 0 ? NULL : fdopendir(fd);
    if (dir == NULL) {
        int err = errno;
        if (fd >= 0) close(fd);
        if (rel[0] != '\0') { /* the root's own failure is reported by op_walk */
            fputc('{', stdout);
            put_string(stdout, "path", rel);
            fputs(",\"type\":\"dir\",", stdout);
            put_error_fields(stdout, err);
            fputs("}\n", stdout);
        }
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (is_dot(entry->d_name)) continue;
        if (w->remaining <= 0) {
            w->truncated = 1;
            break;
        }
        struct stat st;
        int is_dir;
        if (w->sizes || entry->d_type == DT_UNKNOWN) {
            if (fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            is_dir = S_ISDIR(st.st_mode);
        } else {
            is_dir = entry->d_type == DT_DIR;
        }
        size_t rel_length = strlen(rel);
        size_t name_length = strlen(entry->d_name);
        char *child = malloc(rel_length + name_length + 2);
        if (child == NULL) {
            w->truncated = 1;
            break;
        }
        if (rel_length) {
            memcpy(child, rel, rel_length);
            child[rel_length] = '/';
            memcpy(child + rel_length + 1, entry->d_name, name_length + 1);
        } else {
            memcpy(child, entry->d_name, name_length + 1);
        }
        fputc('{', stdout);
        put_string(stdout, "path", child);
        if (w->sizes || entry->d_type == DT_UNKNOWN) {
            put_entry_fields(fd, entry->d_name, &st);
        } else {
            fprintf(stdout, ",\"type\":\"%s\"", dirent_type(entry->d_type));
            if (entry->d_type == DT_LNK) put_link_target(fd, entry->d_name);
        }
        fputs("}\n", stdout);
        w->remaining--;
        if (is_dir && depth < MAX_DEPTH)
            walk_dir(fd, entry->d_name, child, depth + 1, w);
        free(child);
        if (w->truncated) break;
    }
    closedir(dir);
}

static int op_walk(const char *path, const char *max_text, int sizes) {
    long long max_entries;
    if (!parse_size(max_text, &max_entries)) return usage();
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return fail(path, errno);
    struct walk w = {max_entries, 0, sizes};
    walk_dir(fd, ".", "", 0, &w);
    close(fd);
    if (w.truncated) fputs("{\"truncated\":true}\n", stdout);
    return 0;
}

/* ---- stat, move, delete --------------------------------------------------------------- */

static int op_stat(const char *path) {
    struct stat st;
    if (fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(path, errno);
    long long mtime = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    printf("{\"type\":\"%s\",\"size\":%lld,\"mtime_ns\":%lld", type_name(st.st_mode),
           (long long)st.st_size, mtime);
    if (S_ISLNK(st.st_mode)) {
        char target[4096];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n >= 0) {
            target[n] = '\0';
            fputc(',', stdout);
            put_string(stdout, "target", target);
        }
    }
    fputs("}\n", stdout);
    return 0;
}

static int op_move(const char *source, const char *target, int parents, int overwrite) {
    struct parent from, to = {-1, 0, NULL, NULL};
    int err = open_parent(source, 0, &from);
    struct stat st;
    if (!err && fstatat(from.fd, from.name, &st, AT_SYMLINK_NOFOLLOW) != 0) err = errno;
    if (err) {
        close_parent(&from);
        return fail(source, err);
    }
    err = open_parent(target, parents, &to);
    if (!err && !overwrite && fstatat(to.fd, to.name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        close_parent(&from);
        close_parent(&to);
        return fail_message(target, "EEXIST", "the destination already exists");
    }
    if (!err && renameat(from.fd, from.name, to.fd, to.name) != 0) err = errno;
    close_parent(&from);
    close_parent(&to);
    if (err) return fail(target, err);
    puts("{\"moved\":true}");
    return 0;
}

static int op_delete(const char *path) {
    struct parent parent;
    int err = open_parent(path, 0, &parent);
    struct stat st;
    if (!err && fstatat(parent.fd, parent.name, &st, AT_SYMLINK_NOFOLLOW) != 0) err = errno;
    if (!err) {
        int flags = S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0;
        if (unlinkat(parent.fd, parent.name, flags) != 0) err = errno;
    }
    close_parent(&parent);
    if (err) return fail(path, err);
    puts("{\"deleted\":true}");
    return 0;
}

/* ---- main ----------------------------------------------------------------------------- */

static int has_flag(int argc, char **argv, int first, const char *flag) {
    for (int i = first; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, stdout_buffer, _IOFBF, sizeof stdout_buffer);
    if (argc < 3) return usage();
    const char *op = argv[1];
    const char *path = argv[2];
    if (strcmp(op, "read") == 0 && argc == 5) return op_read(path, argv[3], argv[4]);
    if (strcmp(op, "cat") == 0 && argc == 5) return op_cat(path, argv[3], argv[4]);
    if (strcmp(op, "write") == 0 && argc <= 4)
        return op_write(path, has_flag(argc, argv, 3, "--parents"));
    if (strcmp(op, "list") == 0 && argc == 3) return op_list(path);
    if (strcmp(op, "walk") == 0 && (argc == 4 || (argc == 5 && !strcmp(argv[4], "--no-size"))))
        return op_walk(path, argv[3], argc == 4);
    if (strcmp(op, "stat") == 0 && argc == 3) return op_stat(path);
    if (strcmp(op, "move") == 0 && argc >= 4 && argc <= 6)
        return op_move(path, argv[3], has_flag(argc, argv, 4, "--parents"),
                       has_flag(argc, argv, 4, "--overwrite"));
    if (strcmp(op, "delete") == 0 && argc == 3) return op_delete(path);
    return usage();
}
