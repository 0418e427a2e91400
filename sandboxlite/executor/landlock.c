/* sandboxlite executor, Landlock mode (landlock=1).
 *
 * For hosts where no namespace can be had (a container whose seccomp profile
 * refuses them, a managed notebook): the host starts the executor itself, as
 * the sandbox's uid (a root caller's launcher drops to it first), without
 * bwrap and without any namespace.  Instead:
 *   - At start the executor sets no_new_privs and enters a Landlock domain D1:
 *     beneath ro= the filesystem is read and executed, beneath rw= and own=
 *     also written, devrw= device files are read and written, and nothing else
 *     is opened at all; TCP bind and connect are denied (unless net=1);
 *     signals and abstract unix sockets are scoped to the domain.
 *   - The zygote (and a supervisor forked without one) enters a second layer
 *     D2 of the same rules (confine_self): a command can signal its
 *     sandbox's other processes, never the executor (a scoped domain reaches
 *     only itself and the domains nested in it), nor anything outside.  The
 *     file API runs in D1: it reaches what the sandbox reaches, so a symlink
 *     planted out of it is refused as the command's own open would be.
 *   - The executor is a child subreaper: whatever a command leaves behind is
 *     re-parented to it, so kill_tree() (reset, the host's close) reaches the
 *     whole sandbox by walking /proc/PID/task/TID/children.  Every supervisor
 *     and command has a parent-death signal: if the executor is killed
 *     outright they die with it (what they started in turn is not covered).
 *   - A generation is the own= directories emptied (never through a symlink).
 *     Paths are the host's own: the host names the sandbox's directories.
 */
#include "executor.h"

#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#define LL_FS_EXECUTE (1ull << 0)
#define LL_FS_WRITE_FILE (1ull << 1)
#define LL_FS_READ_FILE (1ull << 2)
#define LL_FS_READ_DIR (1ull << 3)
#define LL_FS_MAKE_CHAR (1ull << 6)
#define LL_FS_MAKE_BLOCK (1ull << 11)
#define LL_FS_TRUNCATE (1ull << 14)
#define LL_FS_IOCTL_DEV (1ull << 15)
#define LL_FS_ALL ((1ull << 16) - 1) /* every right up to ABI 5's IOCTL_DEV */
#define LL_FS_FILE (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)
#define LL_FS_RO (LL_FS_EXECUTE | LL_FS_READ_FILE | LL_FS_READ_DIR)
#define LL_FS_RW (LL_FS_ALL & ~(LL_FS_MAKE_CHAR | LL_FS_MAKE_BLOCK))
#define LL_FS_DEV (LL_FS_READ_FILE | LL_FS_WRITE_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)
#define LL_NET_TCP 3ull   /* bind and connect */
#define LL_SCOPE_ALL 3ull /* abstract unix sockets, signals (ABI 6) */
#define LL_MIN_ABI 6

struct ll_ruleset_attr {
  uint64_t handled_access_fs, handled_access_net, scoped;
};
struct ll_path_beneath {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

int ll_ruleset = -1;

static void ll_fail(const char *what, const char *path) {
  dprintf(2, "sandboxlite-executor: landlock: %s%s%s: %s\n", what, path ? " " : "", path ? path : "", strerror(errno));
  _exit(EXIT_SETUP);
}

static void ll_rule(const char *path, uint64_t access, int optional) {
  int fd = open(path, O_PATH | O_CLOEXEC);
  if (fd < 0) {
    if (optional && errno == ENOENT) return;
    ll_fail("opening", path);
  }
  struct stat st;
  if (fstat(fd, &st) < 0) ll_fail("stat", path);
  if (!S_ISDIR(st.st_mode)) access &= LL_FS_FILE; /* a rule on a file takes only a file's rights */
  struct ll_path_beneath pb = {access, fd};
  if (syscall(SYS_landlock_add_rule, ll_ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &pb, 0) < 0)
    ll_fail("adding a rule for", path);
  close(fd);
}

/* The executor's own confinement (D1), before it opens anything of the sandbox's. */
void landlock_start(void) {
  long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, 1 /* LANDLOCK_CREATE_RULESET_VERSION */);
  if (abi < LL_MIN_ABI) {
    if (abi < 0)
      dprintf(2, "sandboxlite-executor: landlock: unavailable: %s\n", strerror(errno));
    else
      dprintf(2, "sandboxlite-executor: landlock: ABI %ld: this mode needs ABI %d (Linux 6.12 or newer)\n", abi,
              LL_MIN_ABI);
    _exit(EXIT_SETUP);
  }
  struct ll_ruleset_attr attr = {LL_FS_ALL, opts.net ? 0 : LL_NET_TCP, LL_SCOPE_ALL};
  ll_ruleset = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
  if (ll_ruleset < 0) ll_fail("creating a ruleset", NULL);
  for (int i = 0; i < opts.n[O_RO]; i++) ll_rule(opts.ro[i], LL_FS_RO, 1);
  for (int i = 0; i < opts.n[O_RW]; i++) ll_rule(opts.rw[i], LL_FS_RW, 0);
  for (int i = 0; i < opts.n[O_OWN]; i++) ll_rule(opts.own[i], LL_FS_RW, 0);
  for (int i = 0; i < opts.n[O_DEVRW]; i++) ll_rule(opts.devrw[i], LL_FS_DEV, 1);
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) ll_fail("becoming a subreaper", NULL);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) ll_fail("no_new_privs", NULL);
  if (syscall(SYS_landlock_restrict_self, ll_ruleset, 0) < 0) ll_fail("entering the domain", NULL);
}

/* SIGSTOP, walk, SIGKILL every process below `pid` (children lists are per thread). */
static void kill_below(pid_t pid, int depth) {
  char path[320];
  snprintf(path, sizeof path, "%d/task", (int)pid);
  DIR *tasks = dir_at(proc_fd, path);
  if (!tasks) return;
  struct dirent *t;
  while ((t = readdir(tasks))) {
    if (t->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%d/task/%s/children", (int)pid, t->d_name);
    int fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf - 1); /* what does not fit is found on the next round */
    close(fd);
    if (n <= 0) continue;
    buf[n] = 0;
    for (char *p = buf, *end; *p; p = end) {
      long c = strtol(p, &end, 10);
      if (end == p) break;
      if (c <= 0) continue;
      kill((pid_t)c, SIGSTOP); /* it forks nothing more while we look below it */
      if (depth < 64) kill_below((pid_t)c, depth + 1);
      kill((pid_t)c, SIGKILL);
    }
  }
  closedir(tasks);
}

/* Landlock mode: kill every process of the sandbox and reap it.  As a subreaper the executor
 * gets whatever is orphaned meanwhile, so the next round finds it; done when nothing is left. */
void kill_tree(void) {
  for (;;) {
    /* signals are scoped to the executor's domain: kill(-1) reaches this sandbox's processes and
     * no others (the executor, the only process of D1, is spared), whatever their uid */
    if (ll_ruleset >= 0) kill(-1, SIGKILL);
    kill_below(getpid(), 0);
    for (;;) {
      pid_t p = waitpid(-1, NULL, WNOHANG | __WALL);
      if (p > 0) continue;
      if (p < 0 && errno == ECHILD) return;
      break;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* Remove everything in the directory `dfd`, never following a symlink: a directory the
 * sandbox made unreadable is made readable first (fchmodat2 refuses a symlink).  At most 200
 * levels deep (two descriptors a level): deeper, ELOOP, and the host replaces the sandbox. */
static int empty_dir(int dfd, int depth) {
  if (depth > 200) {
    errno = ELOOP;
    return -1;
  }
  for (int pass = 0; pass < 4; pass++) { /* entries removed while listing may hide others */
    DIR *d = dir_at(dfd, ".");
    if (!d) return -1;
    int left = 0, err = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      const char *name = e->d_name;
      if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]))) continue;
      if (unlinkat(dfd, name, 0) == 0) continue;
      if (errno != EISDIR) {
        err = errno, left = 1;
        continue;
      }
      if (syscall(SYS_fchmodat2, dfd, name, 0700, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOSYS) {
        err = errno, left = 1;
        continue;
      }
      int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0 || empty_dir(sub, depth + 1) < 0 || unlinkat(dfd, name, AT_REMOVEDIR) < 0) err = errno, left = 1;
      if (sub >= 0) close(sub);
    }
    closedir(d);
    if (!left) return 0;
    if (err == ELOOP || err == EMFILE) {
      errno = err;
      return -1;
    }
    if (pass == 3) {
      errno = err ? err : ENOTEMPTY;
      return -1;
    }
  }
  return 0;
}

/* Landlock mode's generation: the sandbox's own directories, empty. */
int ll_generation(void) {
  if (gen_root < 0 && (gen_root = fcntl(root_fd, F_DUPFD_CLOEXEC, 0)) < 0) return -1;
  for (int i = 0; i < opts.n[O_OWN]; i++) {
    int fd = open(opts.own[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = empty_dir(fd, 0), err = errno;
    close(fd);
    if (r < 0) {
      errno = err;
      return -1;
    }
  }
  gen_ok = 1;
  return 0;
}
