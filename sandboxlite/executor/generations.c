/* sandboxlite executor, generations: the filesystem the commands see.
 *
 * The executor keeps the capabilities bwrap gave it inside the sandbox's user
 * namespace (never on the host) and builds each "generation" in a child G:
 * a new mount namespace whose root is either a copy-on-write overlay over the
 * image (writes land in a size-capped tmpfs) or a recursive bind of the
 * read-only jail root, plus fresh size-capped tmpfs on /tmp, /testbed, /dev/shm
 * (and /root without overlay).  G pivots into it and exits; the executor
 * keeps the namespace (and its root) by descriptor.  Every command joins it
 * with setns(), then drops every capability, sets no_new_privs and loads
 * the seccomp filter before execve.  Reset = kill every process, drop the
 * namespace (its tmpfs go with it), build a new one: no new jail needed. */
#include "executor.h"

/* The snapshot layers the next generation is built over (top first): layer= at start, then each
 * reset's list.  Names only: the layers are directories of the store bound at opts.snaps. */
char layers[MAX_LAYERS][LAYER_ID_MAX + 1];
int n_layers;

/* The generation: its mount and IPC namespaces and its root, by descriptor (-1: none yet). */
int gen_mnt = -1, gen_root = -1, gen_ipc = -1;
int gen_ws = -1; /* the generation's workspace (/.sl/gen: the root overlay's writes), O_PATH */
/* the tmpfs holding a place's writes when it is an overlay over snapshot layers (-1: a plain
 * tmpfs); by descriptor, as the workspace: once the old root is detached, paths reach neither */
int gen_pws[N_PLACE_WS] = {-1, -1, -1};
static int g_pws[N_PLACE_WS] = {-1, -1, -1}; /* G's own descriptors of them, for the report */
/* Templates for sharing (fork without a copy, 'W'): a detached clone (open_tree) of each tmpfs
 * holding the generation's writes that leaves every path when G pivots: the workspace (the root's
 * upper is its u/) and the places that are overlays (p-NAME/u), in SHARE_PLACES order; a place
 * that is a plain tmpfs stays mounted in the root.  Only a process in the generation's mount
 * namespace may clone them again (the kernel's rule for detached mounts). */
const char *const share_places[N_SHARE] = {"root", "testbed", "tmp", "home"};
int gen_tpl[N_SHARE] = {-1, -1, -1, -1};
/* TPL_UPPER: the writes are the template's u/ (an overlay's upper); TPL_PLAIN: no template, the
 * place is a plain tmpfs still mounted in the generation's root (cloned from there: each template
 * costs an expedited RCU grace period when it goes, on every reset and close); 0: not there */
int gen_tpl_kind[N_SHARE];
dev_t gen_plain_dev[N_SHARE]; /* a TPL_PLAIN place's tmpfs, as the generation was built */
const char *const share_dirs[N_SHARE] = {"", "testbed", "tmp", "root"}; /* where in the root */
static int g_tpl[N_SHARE] = {-1, -1, -1, -1}, g_tpl_kind[N_SHARE];
/* The jail's whole root and its /proc.  The executor itself lives chrooted in /proc: a mount
 * table (/proc/PID/mountinfo, readable by any process) lists the mounts under its task's root,
 * and bwrap's mounts name host paths (the image, the host's /etc copy, the caller's mounts).
 * PID 1, and each supervisor until it joins the generation, show none of them. */
int root_fd = -1, proc_fd = -1;
int gen_ok; /* a generation is ready (either mode) */

static void gen_fail(const char *what, const char *path) {
  dprintf(2, "sandboxlite-executor: generation: %s %s: %s\n", what, path ? path : "", strerror(errno));
  _exit(EXIT_SETUP);
}

static void mkdir_p(const char *path, mode_t mode) {
  char buf[PATH_MAX];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, mode) < 0 && errno != EEXIST) gen_fail("mkdir", buf);
    *p = '/';
  }
  if (mkdir(buf, mode) < 0 && errno != EEXIST) gen_fail("mkdir", buf);
}

static void tmpfs_at(const char *path, unsigned long long size, mode_t mode) {
  char mopts[64];
  snprintf(mopts, sizeof mopts, "size=%llu,mode=%o", size, (unsigned)mode);
  mkdir_p(path, 0755);
  if (mount("sandboxlite", path, "tmpfs", MS_NOSUID | MS_NODEV, mopts) < 0) gen_fail("tmpfs", path);
}

static void bind_at(const char *src, const char *dst) {
  if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0) gen_fail("bind", dst);
}

/* The generation's snapshot layers that hold PLACE (root, testbed, tmp, home), top first, as an
 * overlay lowerdir list in out; how many.  A layer that is not in the store fails the generation. */
static int layer_dirs(const char *place, char *out, size_t size) {
  size_t len = 0;
  int n = 0;
  out[0] = 0;
  for (int i = 0; i < n_layers; i++) {
    char p[PATH_MAX];
    struct stat st;
    /* a shared layer attached here ('A'), else one of the store's */
    snprintf(p, sizeof p, FORK_DIR "/%s", layers[i]);
    const char *top = stat(p, &st) == 0 && S_ISDIR(st.st_mode) ? FORK_DIR : opts.snaps;
    if (!top) gen_fail("snapshot layer (no store, not attached)", layers[i]);
    snprintf(p, sizeof p, "%s/%s", top, layers[i]);
    if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode)) gen_fail("snapshot layer", p);
    snprintf(p, sizeof p, "%s/%s/%s", top, layers[i], place);
    if (lstat(p, &st) < 0) {
      if (errno == ENOENT) continue; /* this snapshot changed nothing there */
      gen_fail("snapshot layer", p);
    }
    int w = snprintf(out + len, size - len, "%s%s", n ? ":" : "", p);
    if (w < 0 || (size_t)w >= size - len) {
      errno = E2BIG;
      gen_fail("snapshot layers of", place);
    }
    len += (size_t)w;
    n++;
  }
  return n;
}

/* An overlay at dst; without userxattr when the kernel or the upper tmpfs refuses it. */
static void overlay_at(const char *dst, const char *lowers, const char *ws) {
  char ovl[4096];
  /* userxattr: overlay keeps its marks in user.* xattrs, which a user namespace may set; without
   * it, every directory rename is EXDEV here (dpkg, pip and git rename directories).  A kernel or
   * upper tmpfs without user xattrs refuses the option: then the mount goes on without it */
  int w = snprintf(ovl, sizeof ovl, "lowerdir=%s,upperdir=%s/u,workdir=%s/w,userxattr", lowers, ws, ws);
  if (w < 0 || (size_t)w >= sizeof ovl) {
    errno = E2BIG;
    gen_fail("overlay", dst);
  }
  if (mount("overlay", dst, "overlay", 0, ovl) < 0) {
    ovl[strlen(ovl) - strlen(",userxattr")] = 0;
    if (mount("overlay", dst, "overlay", 0, ovl) < 0) gen_fail("overlay", dst);
  }
}

/* A writable place (/tmp, /testbed, /root) at path: a fresh tmpfs of `size` bytes, or, when the
 * generation's snapshot layers hold it, an overlay over them whose writes land in such a tmpfs
 * (the workspace's p-NAME; nothing is copied: every sandbox started from a snapshot shares it). */
static void place_at(const char *path, const char *place, int which, unsigned long long size, mode_t mode) {
  char lowers[3584], ws[64], dir[80];
  if (!layer_dirs(place, lowers, sizeof lowers)) {
    tmpfs_at(path, size, mode);
    return;
  }
  snprintf(ws, sizeof ws, "/.sl/gen/p-%s", place);
  tmpfs_at(ws, size, 0755);
  if ((g_pws[which] = open(ws, O_PATH | O_DIRECTORY)) < 0) gen_fail("open", ws);
  snprintf(dir, sizeof dir, "%s/u", ws);
  mkdir_p(dir, 0755);
  if (chmod(dir, mode) < 0) gen_fail("chmod", dir); /* the place's own mode (the root of the overlay) */
  snprintf(dir, sizeof dir, "%s/w", ws);
  mkdir_p(dir, 0755);
  mkdir_p(path, 0755);
  overlay_at(path, lowers, ws);
}

/* G: a detached clone of the tmpfs at path, for sharing; none (-1) when the kernel has no open_tree */
static void share_template(int which, const char *path) {
  g_tpl[which] = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE);
  g_tpl_kind[which] = g_tpl[which] >= 0 ? TPL_UPPER : TPL_NONE;
}

/* G: the root at `root`, a copy-on-write overlay over the image (lower=, over the generation's
 * snapshot layers), with the jail's /proc and /dev and the caller's mounts (bind=) again. */
static void gen_overlay_root(const char *root) {
  char path[PATH_MAX], lowers[PATH_MAX];
  mkdir_p("/.sl/gen/u", 0755);
  mkdir_p("/.sl/gen/w", 0755);
  int n = layer_dirs("root", lowers, sizeof lowers - strlen(opts.lower) - 1);
  snprintf(lowers + strlen(lowers), sizeof lowers - strlen(lowers), "%s%s", n ? ":" : "", opts.lower);
  overlay_at(root, lowers, "/.sl/gen");
  static const char *const jail[] = {"proc", "dev", "tmp", "testbed", "root"};
  for (size_t i = 0; i < sizeof jail / sizeof *jail; i++) {
    snprintf(path, sizeof path, "%s/%s", root, jail[i]);
    mkdir_p(path, jail[i][0] == 'r' ? 0700 : 0755);
  }
  snprintf(path, sizeof path, "%s/proc", root);
  bind_at("/proc", path);
  snprintf(path, sizeof path, "%s/dev", root);
  bind_at("/dev", path);
  for (int i = 0; i < opts.n[O_BIND]; i++) {
    snprintf(path, sizeof path, "%s%s", root, opts.binds[i]);
    mkdir_p(path, 0755);
    bind_at(opts.binds[i], path);
  }
}

/* G: the root at `root` without an image, a recursive bind of the jail's root (read-only with
 * rootro=1), the snapshot store covered. */
static void gen_bind_root(const char *root) {
  char path[PATH_MAX];
  bind_at("/", root);
  if (opts.rootro && mount(NULL, root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
    gen_fail("read-only", root);
  if (opts.snaps) { /* the recursive bind copied the snapshot store: covered (a locked mount cannot go) */
    snprintf(path, sizeof path, "%s%s", root, opts.snaps);
    if (mount("sandboxlite", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0") < 0)
      gen_fail("covering", path);
  }
}

/* G: what goes over the root: the writable places (/tmp, /testbed, /root without an image),
 * /dev/shm, a devpts instance, the workdirs (wtmpfs=, mkdir=). */
static void gen_places(const char *root) {
  char path[PATH_MAX];
  snprintf(path, sizeof path, "%s/tmp", root);
  place_at(path, "tmp", PL_TMP, opts.tmp, 01777);
  if (opts.testbed > 0) {
    snprintf(path, sizeof path, "%s/testbed", root);
    place_at(path, "testbed", PL_TESTBED, opts.testbed, 0755);
  }
  if (!opts.lower) {
    snprintf(path, sizeof path, "%s/root", root);
    place_at(path, "home", PL_HOME, opts.tmp, 0700);
  }
  snprintf(path, sizeof path, "%s/dev/shm", root);
  tmpfs_at(path, opts.tmp, 01777);
  /* a devpts instance of the generation's own (over bwrap's, without devdir=): its ptys are
   * capped, since every instance but the host's first draws on one machine-wide kernel.pty.max */
  snprintf(path, sizeof path, "%s/dev/pts", root);
  char ptsopts[96];
  snprintf(ptsopts, sizeof ptsopts, "newinstance,ptmxmode=0666,mode=620,max=%u", opts.ptys);
  if (mount("devpts", path, "devpts", MS_NOSUID | MS_NOEXEC, ptsopts) < 0) gen_fail("devpts", path);
  if (opts.devdir) { /* the rest of what bwrap's --dev would have mounted */
    /* bwrap binds the directory read-write (its read-only remount would add nodev) */
    snprintf(path, sizeof path, "%s/dev", root);
    if (mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID, NULL) < 0) gen_fail("read-only", path);
  }
  for (int i = 0; i < opts.n[O_WTMPFS]; i++) {
    snprintf(path, sizeof path, "%s%s", root, opts.wtmpfs[i]);
    tmpfs_at(path, opts.testbed, 0755);
  }
  for (int i = 0; i < opts.n[O_MKDIR]; i++) {
    snprintf(path, sizeof path, "%s%s", root, opts.mkdirs[i]);
    mkdir_p(path, 0755);
  }
}

/* G: templates of the tmpfs holding the writes, for sharing ('W'; see gen_tpl). */
static void gen_templates(void) {
  char path[PATH_MAX];
  if (opts.lower) share_template(SH_ROOT, "/.sl/gen");
  static const struct {
    int sh, pl;
  } tpl_places[] = {{SH_TESTBED, PL_TESTBED}, {SH_TMP, PL_TMP}, {SH_HOME, PL_HOME}};
  for (size_t i = 0; i < sizeof tpl_places / sizeof *tpl_places; i++) {
    int sh = tpl_places[i].sh, pl = tpl_places[i].pl;
    if ((sh == SH_TESTBED && opts.testbed <= 0) || (sh == SH_HOME && opts.lower)) continue;
    if (g_pws[pl] >= 0) {
      snprintf(path, sizeof path, "/.sl/gen/p-%s", share_places[sh]);
      share_template(sh, path);
    } else {
      g_tpl_kind[sh] = TPL_PLAIN;
    }
  }
}

/* G: build the generation's mount namespace, pivot into it, report, wait. */
static void gen_child(int ready_w, int hold_r) {
  char root[] = "/.sl/gen/r";
  if (fchdir(root_fd) < 0 || chroot(".") < 0) gen_fail("back to the jail's root", NULL);
  /* a mount namespace, and an IPC namespace (SysV and POSIX IPC objects die with the generation) */
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC) < 0) gen_fail("unshare", NULL);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) gen_fail("make private", "/");
  tmpfs_at("/.sl/gen", opts.lower ? opts.upper : (1 << 20), 0755);
  mkdir_p(root, 0755);
  if (opts.lower)
    gen_overlay_root(root);
  else
    gen_bind_root(root);
  gen_places(root);
  gen_templates();
  /* the workspace (the writes of the generation's overlays), for the executor's snapshots: once
   * the old root is detached below, only this descriptor (and the overlays) reach it */
  int ws = open("/.sl/gen", O_PATH | O_DIRECTORY);
  if (ws < 0) gen_fail("open", "/.sl/gen");
  if (chdir(root) < 0) gen_fail("chdir", root);
  if (syscall(SYS_pivot_root, ".", ".") < 0) gen_fail("pivot_root", root);
  if (umount2(".", MNT_DETACH) < 0) gen_fail("umount old root", NULL);
  if (chdir("/") < 0) gen_fail("chdir", "/");
  if (!opts.lower) { /* the recursive bind copied our workspace, and the shared layers attached */
    umount2("/.sl/gen", MNT_DETACH);
    umount2(FORK_DIR, MNT_DETACH);
  }
  char msg[160];
  int len = snprintf(msg, sizeof msg, "%d %d %d %d %d %d %d %d %d %d %d %d", ws, g_pws[PL_TESTBED], g_pws[PL_TMP],
                     g_pws[PL_HOME], g_tpl[0], g_tpl[1], g_tpl[2], g_tpl[3], g_tpl_kind[0], g_tpl_kind[1],
                     g_tpl_kind[2], g_tpl_kind[3]);
  if (write(ready_w, msg, (size_t)len) != len) _exit(EXIT_SETUP);
  char c;
  while (read(hold_r, &c, 1) < 0 && errno == EINTR) {
  }
  _exit(0);
}

/* Fork G, with a pipe it reports on (our end in *ready_r) and one it waits on (our end in
 * *hold_w: G exits when it is closed).  G's pid, or -1 with errno set. */
static pid_t fork_gen(int *ready_r, int *hold_w) {
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) < 0) return -1;
  if (pipe2(hold, O_CLOEXEC) < 0) {
    close(ready[0]), close(ready[1]);
    return -1;
  }
  pid_t g = fork();
  if (g < 0) {
    int err = errno;
    close(ready[0]), close(ready[1]), close(hold[0]), close(hold[1]);
    errno = err;
    return -1;
  }
  if (g == 0) {
    close(ready[0]);
    close(hold[1]);
    /* as an image's User (not uid 0 in the namespace) a non-dumpable G's /proc files belong to
     * the namespace's uid 0, which is not mapped: we could not open them.  Dumpable, they are
     * ours; no command can trace G (it has every capability, commands none) */
    if (getuid() != 0) prctl(PR_SET_DUMPABLE, 1);
    gen_child(ready[1], hold[0]);
  }
  close(ready[1]);
  close(hold[0]);
  *ready_r = ready[0];
  *hold_w = hold[1];
  return g;
}

/* The templates G reported (nums: G's report, see gen_child), and what each is, taken over.  The
 * templates themselves (pidfd_getfd: the same open file; a detached tree is dissolved when the
 * file open_tree made is closed, so reopening /proc/G/fd/N would not keep it). */
static void take_templates(pid_t g, const int *nums, int wsfd, int rootfd) {
  int any_tpl = 0;
  for (int i = 0; wsfd >= 0 && i < N_SHARE; i++) any_tpl |= nums[1 + N_PLACE_WS + i] >= 0;
  int gpid = wsfd >= 0 && any_tpl ? (int)syscall(SYS_pidfd_open, g, 0) : -1;
  for (int i = 0; i < N_SHARE; i++) { /* (a template that cannot be had: no sharing) */
    struct stat st;
    gen_tpl_kind[i] = nums[1 + N_PLACE_WS + N_SHARE + i];
    if (gpid >= 0 && nums[1 + N_PLACE_WS + i] >= 0)
      gen_tpl[i] = (int)syscall(SYS_pidfd_getfd, gpid, nums[1 + N_PLACE_WS + i], 0);
    if (gen_tpl_kind[i] == TPL_UPPER && gen_tpl[i] < 0) gen_tpl_kind[i] = TPL_NONE;
    if (gen_tpl_kind[i] == TPL_PLAIN) { /* (before anything runs there) */
      if (rootfd >= 0 && fstatat(rootfd, share_dirs[i], &st, AT_SYMLINK_NOFOLLOW) == 0)
        gen_plain_dev[i] = st.st_dev;
      else
        gen_tpl_kind[i] = TPL_NONE;
    }
  }
  if (gpid >= 0) close(gpid);
}

/* The places' workspaces G reported (nums), opened again through /proc/G/fd into gen_pws: wsfd,
 * or -1 (wsfd closed) when one of them cannot be. */
static int take_place_ws(pid_t g, const int *nums, int wsfd) {
  char path[64];
  for (int i = 0; wsfd >= 0 && i < N_PLACE_WS; i++) {
    if (gen_pws[i] >= 0) close(gen_pws[i]);
    gen_pws[i] = -1;
    if (nums[1 + i] < 0) continue;
    snprintf(path, sizeof path, "%d/fd/%d", (int)g, nums[1 + i]);
    if ((gen_pws[i] = openat(proc_fd, path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
      close(wsfd);
      wsfd = -1;
    }
  }
  return wsfd;
}

/* Build a new generation; returns 0, or -1 with errno set. */
int new_generation(void) {
  if (opts.landlock) return ll_generation();
  int ready, hold;
  pid_t g = fork_gen(&ready, &hold);
  if (g < 0) return -1;
  /* the old generation's templates: G holds the last copies now, and its exit dissolves them
   * (an expedited RCU grace period each: not on our way) */
  for (int i = 0; i < N_SHARE; i++) {
    if (gen_tpl[i] >= 0) close(gen_tpl[i]);
    gen_tpl[i] = -1;
  }
  char msg[160], path[64];
  ssize_t n;
  do n = read(ready, msg, sizeof msg - 1);
  while (n < 0 && errno == EINTR);
  close(ready);
  int mnt = -1, rootfd = -1, ipc = -1, wsfd = -1, err = EIO;
  if (n > 0) {
    msg[n] = 0;
    snprintf(path, sizeof path, "%d/ns/mnt", (int)g);
    mnt = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "%d/ns/ipc", (int)g);
    ipc = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "%d/root", (int)g);
    rootfd = openat(proc_fd, path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    int nums[1 + N_PLACE_WS + 2 * N_SHARE], k = 0;
    for (char *p = msg, *end; k < 1 + N_PLACE_WS + 2 * N_SHARE; p = end) {
      nums[k++] = (int)strtol(p, &end, 10);
      if (end == p) break;
    }
    snprintf(path, sizeof path, "%d/fd/%d", (int)g, nums[0]);
    wsfd = k == 1 + N_PLACE_WS + 2 * N_SHARE ? openat(proc_fd, path, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
    take_templates(g, nums, wsfd, rootfd);
    wsfd = take_place_ws(g, nums, wsfd);
    if (mnt < 0 || ipc < 0 || rootfd < 0 || wsfd < 0) err = errno ? errno : EIO;
  }
  close(hold); /* G exits (reaped with the other orphans); the namespaces live on through our descriptors */
  if (mnt < 0 || ipc < 0 || rootfd < 0 || wsfd < 0) {
    if (mnt >= 0) close(mnt);
    if (ipc >= 0) close(ipc);
    if (rootfd >= 0) close(rootfd);
    if (wsfd >= 0) close(wsfd);
    errno = err;
    return -1;
  }
  if (gen_mnt >= 0) close(gen_mnt);
  if (gen_ipc >= 0) close(gen_ipc); /* the last reference once the old generation's processes are gone */
  if (gen_root >= 0) close(gen_root);
  if (gen_ws >= 0) close(gen_ws);
  gen_mnt = mnt;
  gen_ipc = ipc;
  gen_root = rootfd;
  gen_ws = wsfd;
  gen_ok = 1;
  return 0;
}

/* Reset: kill every process of the sandbox, then a fresh generation over the snapshot layers the
 * payload names (NUL-terminated, top first; none: the image). */
void do_reset(uint32_t id, const char *payload, size_t plen) {
  char names[MAX_LAYERS][LAYER_ID_MAX + 1];
  int n = 0;
  for (size_t i = 0; i < plen;) {
    size_t len = strnlen(payload + i, plen - i);
    if (i + len == plen || n == MAX_LAYERS || !layer_name_ok(payload + i, len) || opts.landlock ||
        (!opts.snaps && !is_attached(payload + i))) {
      send_errno(id, opts.landlock ? EOPNOTSUPP : EINVAL);
      return;
    }
    memcpy(names[n++], payload + i, len + 1);
    i += len + 1;
  }
  memcpy(layers, names, sizeof names);
  n_layers = n;
  kill_generation();
  detach_unused();
  if (new_generation() < 0) {
    send_errno(id, errno);
    return;
  }
  make_standby();
  send_frame(REP_OK, id, NULL, 0, -1);
}
