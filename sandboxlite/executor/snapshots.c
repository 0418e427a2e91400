/* sandboxlite executor, snapshots (namespaces only).
 *
 * 'P' copies the generation's writes into the directory the host attached: the copy-on-write
 * layer's upper (root/: whiteouts and overlay's opaque marks included) and the writable places
 * (testbed/, tmp/, and home/ without a copy-on-write root; of a place started from snapshot
 * layers, its own upper only: the new snapshot is one more layer).  Every process of the sandbox
 * is stopped (SIGSTOP) for the copy and continued after it; one already stopped stays so.  The
 * copy holds directories, regular files (holes kept), symlinks (copied as they are, never
 * followed), fifos and whiteouts (0:0 character devices); no other device, no socket, no setuid
 * or setgid bit, no xattr but user.* (none of overlay's own in a place that is no overlay
 * upper); a hard link becomes a file of its own.  The host checks the copy again anyway. */
#include "executor.h"

#define MAX_PAUSED 8192
static struct {
  pid_t pid;
  int ours; /* stopped by us (continued after the copy); 0: it was stopped already */
} paused[MAX_PAUSED];
static int n_paused;

/* The start of /proc/PID/WHAT (of the PID namespace) in buf, NUL-terminated: its length, or 0. */
static ssize_t proc_read(pid_t pid, const char *what, char *buf, size_t size) {
  char path[48];
  snprintf(path, sizeof path, "%d/%s", (int)pid, what);
  int fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  return n;
}

/* A process's state letter from PID/stat (0: gone), and its name when asked. */
static char proc_state(pid_t pid, char *comm, size_t clen) {
  char buf[512];
  if (!proc_read(pid, "stat", buf, sizeof buf)) return 0;
  char *l = strchr(buf, '('), *r = strrchr(buf, ')');
  if (!l || !r || r < l || r[1] != ' ' || !r[2]) return '?';
  if (comm && clen) {
    size_t k = (size_t)(r - l - 1);
    if (k >= clen) k = clen - 1;
    memcpy(comm, l + 1, k);
    comm[k] = 0;
  }
  return r[2];
}

/* Is the process waiting in vfork (or clone(CLONE_VFORK)) for its child to exec or exit?  That
 * wait is uninterruptible (state D), and lasts as long as the child is stopped: the parent does
 * nothing meanwhile, so it counts as paused (dash runs commands with vfork). */
static int in_vfork(pid_t pid) {
  char buf[64];
  if (!proc_read(pid, "syscall", buf, sizeof buf)) return 0;
  char *end;
  long nr = strtol(buf, &end, 10);
  if (end == buf) return 0;
#ifdef SYS_vfork
  if (nr == SYS_vfork) return 1;
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
  return nr == SYS_clone || nr == SYS_clone3;
}

/* Stopped, gone, or (above) waiting for a stopped vfork child. */
static int is_still(pid_t pid) {
  char st = proc_state(pid, NULL, 0);
  return !st || st == 'T' || st == 't' || st == 'Z' || st == 'X' || (st == 'D' && in_vfork(pid));
}

static int is_paused(pid_t pid) {
  for (int i = 0; i < n_paused; i++)
    if (paused[i].pid == pid) return 1;
  return 0;
}

/* One pass over the PID namespace: stop every process not seen yet; how many were new (-1: too
 * many).  A process with a stop pending forks nothing more (fork fails over a pending signal and
 * is restarted after it), so a pass that finds nothing new has them all. */
static int pause_pass(void) {
  DIR *d = dir_at(proc_fd, ".");
  if (!d) return -1;
  int added = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    char *end;
    long p = strtol(e->d_name, &end, 10);
    if (*end || p <= 1 || is_paused((pid_t)p)) continue; /* PID 1 is us */
    char st = proc_state((pid_t)p, NULL, 0);
    if (!st || st == 'Z' || st == 'X') continue;
    if (n_paused == MAX_PAUSED) {
      added = -1;
      break;
    }
    int ours = st != 'T' && st != 't';
    if (ours) kill((pid_t)p, SIGSTOP);
    paused[n_paused].pid = (pid_t)p;
    paused[n_paused++].ours = ours;
    added++;
  }
  closedir(d);
  return added;
}

static void resume_all(void) {
  for (int i = 0; i < n_paused; i++)
    if (paused[i].ours) kill(paused[i].pid, SIGCONT);
  n_paused = 0;
}

/* Stop every process of the sandbox; 0, or -1 with `why` naming those that did not stop in 2 s
 * (an uninterruptible sleep, a tracer's stop) after they are all continued again. */
static int pause_all(char *why, size_t wlen) {
  n_paused = 0;
  int waited_us = 0;
  for (;;) {
    int added;
    while ((added = pause_pass()) > 0) {
    }
    if (added < 0) {
      snprintf(why, wlen, "more than %d processes", MAX_PAUSED);
      resume_all();
      return -1;
    }
    int left = 0;
    for (int i = 0; i < n_paused; i++) left += !is_still(paused[i].pid);
    if (!left && pause_pass() == 0) return 0; /* and nothing new meanwhile */
    if (waited_us >= 2000000) break;
    struct timespec ts = {0, waited_us < 10000 ? 50000 : 1000000};
    nanosleep(&ts, NULL);
    waited_us += waited_us < 10000 ? 50 : 1000;
  }
  size_t len = 0;
  why[0] = 0;
  for (int i = 0; i < n_paused && len + 80 < wlen; i++) {
    char comm[32] = "?";
    char st = proc_state(paused[i].pid, comm, sizeof comm);
    if (is_still(paused[i].pid)) continue;
    int w = snprintf(why + len, wlen - len, "%spid %d (%s) in state %c", len ? ", " : "", (int)paused[i].pid, comm, st);
    if (w > 0) len += (size_t)w;
  }
  resume_all();
  return -1;
}

struct copy_job {
  unsigned long long left; /* bytes the snapshot may still take */
  unsigned long long bytes, files;
  int keep_overlay_xattrs; /* an overlay upper: its user.overlay.* marks are the layer's meaning */
};

static int copy_xattrs(int src, int dst, const struct copy_job *job) {
  char names[4096], val[4096];
  ssize_t n = flistxattr(src, names, sizeof names);
  if (n < 0) return errno == ENOTSUP ? 0 : -1;
  for (char *k = names; k < names + n; k += strlen(k) + 1) {
    if (strncmp(k, "user.", 5)) continue; /* security.*, trusted.*, system.*: never */
    if (!job->keep_overlay_xattrs && !strncmp(k, "user.overlay.", 13)) continue;
    ssize_t v = fgetxattr(src, k, val, sizeof val);
    if (v < 0 || fsetxattr(dst, k, val, (size_t)v, 0) < 0) return -1;
  }
  return 0;
}

/* A regular file's data, holes kept (a 1 TB sparse file takes what it holds, not 1 TB). */
static int copy_data(int s, int d, off_t size, blkcnt_t blocks) {
  static char small[64 << 10];
  if (size <= (off_t)sizeof small && (off_t)blocks * 512 >= size) { /* small and dense: one read, one write */
    ssize_t n = 0, r;
    while (n < size && (r = read(s, small + n, (size_t)(size - n))) != 0) {
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return -1;
      n += r;
    }
    for (ssize_t w = 0, k; w < n; w += k)
      if ((k = write(d, small + w, (size_t)(n - w))) < 0) {
        if (errno != EINTR) return -1;
        k = 0;
      }
    return n == size ? 0 : ftruncate(d, size);
  }
  off_t off = 0;
  while (off < size) {
    off_t data = lseek(s, off, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break; /* a hole to the end */
      return -1;
    }
    off_t hole = lseek(s, data, SEEK_HOLE);
    if (hole < 0 || lseek(d, data, SEEK_SET) < 0) return -1;
    off_t in = data;
    while (in < hole) {
      ssize_t n = sendfile(d, s, &in, (size_t)(hole - in < (1 << 30) ? hole - in : (1 << 30)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -1;
      if (n == 0) break;
    }
    off = hole;
  }
  return ftruncate(d, size);
}

static int copy_tree(int sdir, int ddir, int depth, struct copy_job *job);

/* One entry `name` of sdir into ddir; 0, or -1 with errno. */
static int copy_entry(int sdir, int ddir, const char *name, int depth, struct copy_job *job) {
  struct stat st;
  if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) return errno == ENOENT ? 0 : -1;
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  unsigned long long cost = 512 + (S_ISREG(st.st_mode) ? (unsigned long long)st.st_blocks * 512 : 0);
  if (cost > job->left) {
    errno = EFBIG;
    return -1;
  }
  job->left -= cost;
  job->files++;
  int s = -1, d = -1, r = -1;
  if (S_ISDIR(st.st_mode)) {
    if (depth >= 200) {
      errno = ELOOP;
      return -1;
    }
    if ((s = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) return -1;
    if (mkdirat(ddir, name, 0700) == 0 && (d = openat(ddir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
      r = copy_xattrs(s, d, job) == 0 && copy_tree(s, d, depth + 1, job) == 0 &&
              fchmod(d, st.st_mode & 01777) == 0 && futimens(d, times) == 0 ? 0 : -1;
  } else if (S_ISREG(st.st_mode)) {
    if ((s = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)) < 0) return -1;
    if ((d = openat(ddir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) >= 0)
      r = copy_data(s, d, st.st_size, st.st_blocks) == 0 && copy_xattrs(s, d, job) == 0 && fchmod(d, st.st_mode & 0777) == 0 &&
              futimens(d, times) == 0 ? 0 : -1;
    job->bytes += (unsigned long long)st.st_size;
  } else if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    ssize_t n = readlinkat(sdir, name, target, sizeof target - 1);
    if (n < 0) return -1;
    target[n] = 0;
    r = symlinkat(target, ddir, name) == 0 && utimensat(ddir, name, times, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -1;
  } else if (S_ISCHR(st.st_mode) && st.st_rdev == 0) { /* overlay's whiteout: this name was removed */
    r = mknodat(ddir, name, S_IFCHR, 0);
  } else if (S_ISFIFO(st.st_mode)) {
    r = mkfifoat(ddir, name, st.st_mode & 0777) == 0 && utimensat(ddir, name, times, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -1;
  } else {
    return 0; /* a socket, or a device (no command can make one): not part of a snapshot */
  }
  int err = errno;
  if (s >= 0) close(s);
  if (d >= 0) close(d);
  errno = err;
  return r;
}

static int copy_tree(int sdir, int ddir, int depth, struct copy_job *job) {
  DIR *dir = dir_at(sdir, ".");
  if (!dir) return -1;
  int r = 0;
  struct dirent *e;
  while (r == 0 && (e = readdir(dir))) {
    const char *n = e->d_name;
    if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]))) continue;
    r = copy_entry(sdir, ddir, n, depth, job);
  }
  int err = errno;
  closedir(dir);
  errno = err;
  return r;
}

/* Does the directory hold anything? */
static int dir_empty(int dfd) {
  DIR *dir = dir_at(dfd, ".");
  if (!dir) return 1;
  int empty = 1;
  struct dirent *e;
  while (empty && (e = readdir(dir)))
    if (!(e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))) empty = 0;
  closedir(dir);
  return empty;
}

/* The writes of one place: the upper of its overlay in the workspace (ws_name/u), else the tmpfs
 * mounted at `at` in the generation.  -1 with errno ENOENT when the place is not there. */
static int place_source(int ws, const char *at, int *upper) {
  *upper = ws >= 0;
  if (ws >= 0) return openat(ws, "u", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  return open_in(at, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
}

/* Copy one place's writes (the directory src) into dst/NAME, unless there are none. */
static int copy_place(int src, int dst, const char *name, struct copy_job *job) {
  if (dir_empty(src)) return 0;
  struct stat st;
  int d = -1;
  int r = fstat(src, &st) == 0 && mkdirat(dst, name, 0700) == 0 &&
                  (d = openat(dst, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0 &&
                  copy_tree(src, d, 0, job) == 0 && fchmod(d, st.st_mode & 01777) == 0 &&
                  futimens(d, (struct timespec[2]){st.st_atim, st.st_mtim}) == 0 ? 0 : -1;
  int err = errno;
  if (d >= 0) close(d);
  errno = err;
  return r;
}

/* The places of the shared layer `layer` (attached here: its raw copy when it has one), as a layer. */
static int snapshot_attached(const char *layer, int dst, struct copy_job *job) {
  char base[PATH_MAX], p[PATH_MAX];
  attached_dir(layer, base, sizeof base);
  job->keep_overlay_xattrs = 1; /* the children read it as a layer: its marks mean what they meant to them */
  for (int i = 0; i < N_SHARE; i++) {
    snprintf(p, sizeof p, "%s/%s", base, share_places[i]);
    int src = openat(root_fd, p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (src < 0 && errno == ENOENT) continue;
    if (src < 0) return -1;
    int r = copy_place(src, dst, share_places[i], job), err = errno;
    close(src);
    errno = err;
    if (r < 0) return -1;
  }
  return 0;
}

static int snapshot_places(int dst, struct copy_job *job) {
  struct {
    const char *name;
    int ws;
    const char *at;
    int wanted;
  } places[] = {
    {"root", gen_ws, NULL, opts.lower != NULL},
    {"testbed", gen_pws[PL_TESTBED], "/testbed", opts.testbed > 0},
    {"tmp", gen_pws[PL_TMP], "/tmp", 1},
    {"home", gen_pws[PL_HOME], "/root", opts.lower == NULL},
  };
  for (size_t i = 0; i < sizeof places / sizeof *places; i++) {
    if (!places[i].wanted) continue;
    int upper;
    int src = place_source(places[i].ws, places[i].at, &upper);
    if (src < 0) return -1;
    job->keep_overlay_xattrs = upper; /* in a plain tmpfs, user.overlay.* are the commands' own */
    int r = copy_place(src, dst, places[i].name, job), err = errno;
    close(src);
    errno = err;
    if (r < 0) return -1;
  }
  return 0;
}

/* 'P': payload "MAX_BYTES" (or "MAX_BYTES NAME": the shared layer NAME attached here instead of the
 * generation's writes), one directory attached (empty, the host's: where the copy goes).
 * OK "BYTES FILES", OK "busy: WHO" when processes could not be stopped, or ERROR. */
/* 'P': payload "MAX_BYTES" (or "MAX_BYTES NAME": the shared layer NAME attached here instead of the
 * generation's writes), one directory attached (empty, the host's: where the copy goes).
 * OK "BYTES FILES", OK "busy: WHO" when processes could not be stopped, or ERROR. */
void do_snapshot(uint32_t id, const char *payload, int *fds, int nfds) {
  unsigned long long max;
  struct stat st;
  if (opts.landlock) {
    send_errno(id, EOPNOTSUPP);
    return;
  }
  char num[32];
  const char *layer = strchr(payload, ' ');
  snprintf(num, sizeof num, "%.*s", layer ? (int)(layer - payload) : (int)strlen(payload), payload);
  if (nfds != 1 || parse_number(num, &max) < 0 || fstat(fds[0], &st) < 0 || !S_ISDIR(st.st_mode) ||
      (layer && !(layer_name_ok(layer + 1, strlen(layer + 1)) && is_attached(layer + 1)))) {
    send_errno(id, EINVAL);
    return;
  }
  if (layer) { /* a shared layer attached here: nothing writes there, nothing to pause */
    struct copy_job job = {max, 0, 0, 0};
    if (snapshot_attached(layer + 1, fds[0], &job) < 0) {
      send_errno(id, errno);
      return;
    }
    char msg[64];
    snprintf(msg, sizeof msg, "%llu %llu", job.bytes, job.files);
    send_str(REP_OK, id, msg);
    return;
  }
  char why[MAX_REPLY_PAYLOAD - 64];
  if (pause_all(why, sizeof why) < 0) {
    char msg[MAX_REPLY_PAYLOAD];
    snprintf(msg, sizeof msg, "busy: %s", why);
    send_str(REP_OK, id, msg);
    return;
  }
  struct copy_job job = {max, 0, 0, 0};
  int r = snapshot_places(fds[0], &job), err = errno;
  resume_all();
  if (r < 0) {
    send_errno(id, err);
    return;
  }
  char msg[64];
  snprintf(msg, sizeof msg, "%llu %llu", job.bytes, job.files);
  send_str(REP_OK, id, msg);
}
