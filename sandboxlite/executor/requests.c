/* sandboxlite executor: the requests that act in the generation without a process of their own.
 * The file API (open, mkdir, symlink), resolved in the generation's root by PID 1; loopback TCP
 * sockets in the sandbox's network namespace; the namespace's last pid. */
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
