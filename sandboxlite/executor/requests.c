/* sandboxlite executor: the requests that act in the generation without a process of their own.
 * The file API (open, mkdir, symlink, stat, list, remove, rename), resolved in the generation's
 * root by PID 1; loopback TCP sockets in the sandbox's network namespace; the namespace's last pid. */
#include "executor.h"

/* Open a path inside the generation's root: symlinks and ".." resolve there. */
int open_in(const char *path, int flags, mode_t mode) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = (unsigned long long)flags;
  how.mode = ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? mode : 0;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  /* EAGAIN: a ".." raced with a rename or a mount anywhere on the machine (the kernel could
   * not prove it stayed inside); other sandboxes mount all the time, so try again */
  for (int tries = 0;; tries++) {
    int fd = (int)syscall(SYS_openat2, gen_root, path, &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN || tries == 100) return fd;
  }
}

/* The directory holding `path` (opened in the generation) and its last name. */
static int parent_in(char *path, const char **name) {
  char *slash = strrchr(path, '/');
  if (!slash) {
    *name = path;
    return open_in("/", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  }
  *name = slash + 1;
  *slash = 0;
  int fd = open_in(*path ? path : "/", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  *slash = '/';
  return fd;
}

/* mkdir -p inside the generation; with `last` also the final component. */
static int mkdirs_in(char *path, mode_t mode, int last) {
  size_t len = strlen(path);
  for (size_t i = 1; i <= len; i++) {
    if (i < len && path[i] != '/') continue;
    if (i == len && !last) break;
    char saved = path[i];
    path[i] = 0;
    int fd = open_in(path, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd >= 0) {
      close(fd);
    } else if (errno == ENOENT) {
      const char *name;
      int dir = parent_in(path, &name);
      int r = dir < 0 ? -1 : mkdirat(dir, name, mode);
      int err = errno;
      if (dir >= 0) close(dir);
      if (r < 0 && err != EEXIST) {
        path[i] = saved;
        errno = err;
        return -1;
      }
    } else {
      path[i] = saved;
      return -1;
    }
    path[i] = saved;
  }
  return 0;
}

void do_open(uint32_t id, char *payload, size_t plen) {
  char *f[4];
  if (split(payload, plen, f, 4) != 3) {
    send_errno(id, EINVAL);
    return;
  }
  unsigned flags = (unsigned)strtoul(f[0], NULL, 10);
  mode_t mode = (mode_t)strtoul(f[1], NULL, 10);
  char *path = f[2];
  if (flags & OP_MKPARENTS) {
    if (mkdirs_in(path, 0755, 0) < 0) {
      send_errno(id, errno);
      return;
    }
  }
  int oflags = (int)(flags & OP_KERNEL_MASK) | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
  int fd = open_in(path, oflags, mode);
  if (fd < 0) {
    send_errno(id, errno);
    return;
  }
  /* the file API acts as PID 1, and /proc/self (or /proc/1) here is the executor itself:
   * its memory, maps and descriptors are not the sandbox's files */
  struct statfs sfs;
  if (fstatfs(fd, &sfs) < 0 || sfs.f_type == PROC_SUPER_MAGIC) {
    close(fd);
    send_errno(id, EACCES);
    return;
  }
  struct stat st;
  if (fstat(fd, &st) < 0) {
    int err = errno;
    close(fd);
    send_errno(id, err);
    return;
  }
  if ((flags & OP_REQ_REG) && !S_ISREG(st.st_mode)) {
    close(fd);
    send_errno(id, S_ISDIR(st.st_mode) ? EISDIR : EINVAL);
    return;
  }
  if ((flags & OP_REQ_DIR) && !S_ISDIR(st.st_mode)) {
    close(fd);
    send_errno(id, ENOTDIR);
    return;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  send_frame(REP_FD, id, NULL, 0, fd); /* no payload: the host fstat()s what it gets, never trusting us */
  close(fd);
}

void do_mkdir(uint32_t id, char *payload, size_t plen) {
  char *f[3];
  if (split(payload, plen, f, 3) != 2) {
    send_errno(id, EINVAL);
    return;
  }
  mode_t mode = (mode_t)strtoul(f[0], NULL, 10);
  if (mkdirs_in(f[1], mode, 1) < 0) {
    send_errno(id, errno);
    return;
  }
  int fd = open_in(f[1], O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) {
    send_errno(id, errno);
    return;
  }
  close(fd);
  send_frame(REP_OK, id, NULL, 0, -1);
}

void do_symlink(uint32_t id, char *payload, size_t plen) {
  char *f[3];
  if (split(payload, plen, f, 3) != 2) {
    send_errno(id, EINVAL);
    return;
  }
  if (mkdirs_in(f[1], 0755, 0) < 0) {
    send_errno(id, errno);
    return;
  }
  const char *name;
  int dir = parent_in(f[1], &name);
  if (dir < 0 || symlinkat(f[0], dir, name) < 0) {
    int err = errno;
    if (dir >= 0) close(dir);
    send_errno(id, err);
    return;
  }
  close(dir);
  send_frame(REP_OK, id, NULL, 0, -1);
}

/* ---- stat, list, remove, rename ------------------------------------------------------------
 * Paths resolve in the generation's root as open's do; the last name is never followed (but for
 * 'I' "1"), and every change is made by name relative to a directory descriptor, so no link is
 * ever followed out of where the request points.  Nothing on procfs: /proc/1 there is the
 * executor itself (see do_open), and its links would name what PID 1 holds. */

#define REMOVE_DEPTH_MAX 128 /* directories nested deeper are not emptied (ELOOP): PID 1's stack and descriptors */

/* -1 with errno EACCES when `fd` is on procfs (or cannot be told), else 0. */
static int refuse_proc(int fd) {
  struct statfs sfs;
  if (fstatfs(fd, &sfs) < 0) return -1;
  if (sfs.f_type == PROC_SUPER_MAGIC) {
    errno = EACCES;
    return -1;
  }
  return 0;
}

/* A name a request may act on: not empty, ".", ".." (the root, or the walk up, never are). */
static int plain_name(const char *name) {
  return *name && strcmp(name, ".") && strcmp(name, "..");
}

/* A stream of records ('I', 'G'): payloads cut at MAX_REPLY_PAYLOAD, an empty 'R' at the end. */
struct stream {
  uint32_t id;
  size_t len;
  char buf[MAX_REPLY_PAYLOAD];
};

static void stream_put(struct stream *s, const char *p, size_t n) {
  while (n) {
    size_t k = sizeof s->buf - s->len < n ? sizeof s->buf - s->len : n;
    memcpy(s->buf + s->len, p, k);
    s->len += k;
    p += k;
    n -= k;
    if (s->len == sizeof s->buf) { /* full: never empty, so never read as the end */
      send_frame(REP_OK, s->id, s->buf, (uint32_t)s->len, -1);
      s->len = 0;
    }
  }
}

static void stream_end(struct stream *s) {
  if (s->len) send_frame(REP_OK, s->id, s->buf, (uint32_t)s->len, -1);
  send_frame(REP_OK, s->id, NULL, 0, -1);
}

static char type_char(mode_t m) {
  return S_ISREG(m) ? 'f' : S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : S_ISFIFO(m) ? 'p' : S_ISSOCK(m) ? 's'
         : S_ISCHR(m) ? 'c' : S_ISBLK(m) ? 'b' : '?';
}

/* A record fits here: the numbers, a name (NAME_MAX), a link's target (below PATH_MAX), NULs. */
#define RECORD_MAX (128 + NAME_MAX + 1 + PATH_MAX + 1)

/* The record of `st` and `name` into rec (RECORD_MAX bytes), a link's target read at `dfd`, `lname`
 * ("" with a descriptor of the link itself); its length, or -1 with errno. */
static int record(char *rec, const struct stat *st, const char *name, int dfd, const char *lname) {
  int n = snprintf(rec, 128, "%c %u %lld %lld %ld %u %u", type_char(st->st_mode), (unsigned)(st->st_mode & 07777),
                   (long long)st->st_size, (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec,
                   (unsigned)st->st_uid, (unsigned)st->st_gid);
  size_t len = (size_t)n + 1, nl = strlen(name); /* + the NUL snprintf wrote */
  if (n < 0 || n >= 128 || nl > NAME_MAX) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(rec + len, name, nl + 1);
  len += nl + 1;
  if (S_ISLNK(st->st_mode)) {
    ssize_t t = readlinkat(dfd, lname, rec + len, PATH_MAX);
    if (t < 0) return -1;
    if (t >= PATH_MAX) { /* cut: no link is that long, so it changed meanwhile */
      errno = ENAMETOOLONG;
      return -1;
    }
    len += (size_t)t;
  }
  rec[len++] = 0;
  return (int)len;
}

/* 'I': what `path` is; its last name a link described ("0"), or followed within the root ("1").
 * An O_PATH descriptor of it, never opened for reading: a fifo or a device is only looked at. */
void do_stat(uint32_t id, char *payload, size_t plen) {
  static char rec[RECORD_MAX];
  char *f[3];
  if (split(payload, plen, f, 3) != 2 || (strcmp(f[0], "0") && strcmp(f[0], "1"))) {
    send_errno(id, EINVAL);
    return;
  }
  int fd = open_in(f[1], O_PATH | O_CLOEXEC | (f[0][0] == '1' ? 0 : O_NOFOLLOW), 0);
  struct stat st;
  int n = fd < 0 || refuse_proc(fd) < 0 || fstat(fd, &st) < 0 ? -1 : record(rec, &st, "", fd, "");
  int err = errno;
  if (fd >= 0) close(fd);
  if (n < 0) {
    send_errno(id, err);
    return;
  }
  struct stream s = {.id = id};
  stream_put(&s, rec, (size_t)n);
  stream_end(&s);
}

/* 'G': a record per entry of a directory (links described, never followed: fstatat and readlinkat
 * by name in it).  The caps bound what the host takes in: past them an error, even after part of
 * the stream went (the host drops it).  An entry gone meanwhile is left out. */
void do_list(uint32_t id, char *payload, size_t plen) {
  static char rec[RECORD_MAX];
  char *f[4];
  unsigned long long max_entries, max_bytes;
  if (split(payload, plen, f, 4) != 3 || parse_number(f[0], &max_entries) < 0 || parse_number(f[1], &max_bytes) < 0) {
    send_errno(id, EINVAL);
    return;
  }
  int fd = open_in(f[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  DIR *d = fd < 0 || refuse_proc(fd) < 0 ? NULL : fdopendir(fd);
  if (!d) {
    int err = errno;
    if (fd >= 0) close(fd);
    send_errno(id, err);
    return;
  }
  struct stream s = {.id = id};
  unsigned long long entries = 0, bytes = 0;
  int err = 0;
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
      err = errno;
      break;
    }
    if (!plain_name(e->d_name)) continue;
    struct stat st;
    int n = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ? -1
            : record(rec, &st, e->d_name, dirfd(d), e->d_name);
    if (n < 0 && errno == ENOENT) continue;
    if (n < 0) {
      err = errno;
      break;
    }
    if (++entries > max_entries) {
      err = E2BIG;
      break;
    }
    if ((bytes += (unsigned)n) > max_bytes) {
      err = EFBIG;
      break;
    }
    stream_put(&s, rec, (size_t)n);
  }
  closedir(d);
  if (err) send_errno(id, err);
  else stream_end(&s);
}

/* Empty the directory open at `fd` (closed here), `depth` levels below the one being removed.
 * Every entry is removed by name in it: a link is unlinked, never followed; a directory is opened
 * O_NOFOLLOW (swapped for a link meanwhile, the open fails) and emptied first.  A directory of
 * another device (a mount inside) is not ours to empty: EBUSY, as its rmdir would be. */
static int empty_dir(int fd, dev_t dev, int depth) {
  struct stat st;
  int err = 0;
  if (fstat(fd, &st) < 0) err = errno;
  else if (st.st_dev != dev) err = EBUSY;
  else if (depth > REMOVE_DEPTH_MAX) err = ELOOP;
  DIR *d = err ? NULL : fdopendir(fd);
  if (!d) {
    if (!err) err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  for (;;) {
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
      err = errno;
      break;
    }
    const char *n = e->d_name;
    if (!plain_name(n)) continue;
    /* unlink refuses a directory with EISDIR (Linux): then, and only then, go down */
    if (unlinkat(dirfd(d), n, 0) == 0 || errno == ENOENT) continue;
    if (errno != EISDIR) {
      err = errno;
      break;
    }
    int sub = openat(dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (sub < 0 || empty_dir(sub, dev, depth + 1) < 0 || (unlinkat(dirfd(d), n, AT_REMOVEDIR) < 0 && errno != ENOENT)) {
      err = errno;
      break;
    }
  }
  closedir(d);
  errno = err;
  return err ? -1 : 0;
}

/* 'V': remove what `path` names (a link itself, never what it points to); "1" empties a directory
 * first (empty_dir).  The last name must be a plain one: never the root, never "..". */
void do_remove(uint32_t id, char *payload, size_t plen) {
  char *f[3];
  if (split(payload, plen, f, 3) != 2 || (strcmp(f[0], "0") && strcmp(f[0], "1"))) {
    send_errno(id, EINVAL);
    return;
  }
  const char *name;
  int dir = parent_in(f[1], &name), r = -1;
  struct stat st, up;
  if (dir < 0 || refuse_proc(dir) < 0) {
    /* errno set */
  } else if (!plain_name(name)) {
    errno = EINVAL;
  } else if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && fstat(dir, &up) == 0) {
    if (S_ISDIR(st.st_mode) && st.st_dev != up.st_dev) {
      errno = EBUSY; /* a mount point: its rmdir would fail, so nothing is emptied first */
    } else if (!S_ISDIR(st.st_mode)) {
      r = unlinkat(dir, name, 0);
    } else if (f[0][0] == '0') {
      r = unlinkat(dir, name, AT_REMOVEDIR); /* ENOTEMPTY unless empty */
    } else {
      int sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      r = sub < 0 || empty_dir(sub, st.st_dev, 1) < 0 ? -1 : unlinkat(dir, name, AT_REMOVEDIR);
    }
  }
  int err = errno;
  if (dir >= 0) close(dir);
  if (r < 0) send_errno(id, err);
  else send_frame(REP_OK, id, NULL, 0, -1);
}

/* 'N': renameat of the last names, each in its parent (resolved in the root): a link is moved,
 * never followed; across mounts the kernel says EXDEV. */
void do_rename(uint32_t id, char *payload, size_t plen) {
  char *f[3];
  if (split(payload, plen, f, 3) != 2) {
    send_errno(id, EINVAL);
    return;
  }
  const char *sname, *dname;
  int sdir = parent_in(f[0], &sname), ddir = sdir < 0 ? -1 : parent_in(f[1], &dname), r = -1;
  if (sdir < 0 || ddir < 0 || refuse_proc(sdir) < 0 || refuse_proc(ddir) < 0) {
    /* errno set */
  } else if (!plain_name(sname) || !plain_name(dname)) {
    errno = EINVAL;
  } else {
    r = renameat(sdir, sname, ddir, dname);
  }
  int err = errno;
  if (sdir >= 0) close(sdir);
  if (ddir >= 0) close(ddir);
  if (r < 0) send_errno(id, err);
  else send_frame(REP_OK, id, NULL, 0, -1);
}

/* 'T': a loopback TCP socket inside the sandbox's network namespace, for the host (never for a
 * command: only the host holds it).  PID 1 made no network namespace of its own under Landlock,
 * so there the request is refused: the socket would be the host's loopback. */
void do_loopback(uint32_t id, char *payload, size_t plen) {
  char *f[2];
  unsigned long long port;
  if (opts.landlock) {
    send_errno(id, EPERM);
    return;
  }
  if (split(payload, plen, f, 2) != 1 || (strncmp(f[0], "listen ", 7) && strncmp(f[0], "connect ", 8)) ||
      parse_number(strchr(f[0], ' ') + 1, &port) < 0 || port == 0 || port > 65535) {
    send_errno(id, EINVAL);
    return;
  }
  int listen_ = f[0][0] == 'l';
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    send_errno(id, errno);
    return;
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1, r;
  if (listen_) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    r = bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0 ? -1 : 0;
  } else {
    r = connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS ? -1 : 0;
  }
  if (r < 0) {
    int err = errno;
    close(fd);
    send_errno(id, err);
    return;
  }
  send_frame(REP_FD, id, NULL, 0, fd); /* the host checks what it is */
  close(fd);
}

/* 'L': the PID namespace's last pid ("0" when it cannot be read). */
void do_last_pid(uint32_t id) {
  char buf[32] = "0";
  int fd = openat(proc_fd, "sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t r = read(fd, buf, sizeof buf - 1);
    buf[r > 0 ? r : 0] = 0;
    close(fd);
  }
  buf[strcspn(buf, "\n")] = 0;
  send_str(REP_OK, id, buf);
}
