/* sandboxlite executor, sharing: fork without a copy (namespaces only).
 *
 * 'W' share, payload "1 COUNT" or "0 COUNT": COUNT sets of the generation's writes as detached,
 * read-only (nosuid, nodev) mounts of the tmpfs that hold them, one per place with writes (root:
 * the copy-on-write layer's upper; testbed, tmp, home), to be a lower layer of other sandboxes:
 * COUNT 'F' frames, each with payload the places' mask ("1101": root, testbed, tmp, home) and
 * the descriptors in that order; 'E' ends them early (EOPNOTSUPP without namespaces or without
 * open_tree).  "1" first kills every process of the
 * sandbox: nothing may write there any more, and the host starts this sandbox over too ('Z'
 * with the shared layer on top: nothing is copied, so it cannot go on writing where the others
 * read).  A set per sandbox: a mount attaches once.  "NAME COUNT" instead: sets of the shared
 * layer NAME attached here (the layers under a fork's own), of its raw copy when it has one.
 * 'A' attach, payload "NAME\0MASK\0" with a set of such descriptors: mounts them at
 * FORK_DIR/NAME/PLACE in PID 1's mount namespace, where every generation's 'Z' finds NAME
 * among its layers (a generation's own namespace starts as a copy of it; the commands never
 * see it: they live in the generation's root).  "NAME\0MASK\0raw\0": a second set of NAME kept at
 * FORK_DIR/NAME/raw, only to clone from ('W' NAME) when NAME's own set was idmapped for this
 * sandbox's host uid (an idmapped mount is idmapped once).  A reset unmounts the shared layers
 * its generation is not built over.  Cloning again needs the generation's mount namespace (the kernel clones a detached
 * mount only in the namespace it came from): a helper joins it for 'W'. */
#include "executor.h"

static int fork_dir_ready; /* FORK_DIR is mounted (fork_dir, at the first attach) */

/* Is the shared layer NAME attached ('A')? */
int is_attached(const char *name) {
  char p[PATH_MAX];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", FORK_DIR + 1, name);
  return fstatat(root_fd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Where the attached shared layer NAME's places are, relative to root_fd: its raw/ copy when it has
 * one (not idmapped: what to clone or copy from), else its own set. */
void attached_dir(const char *name, char *base, size_t size) {
  struct stat st;
  snprintf(base, size, "%s/%s/raw", FORK_DIR + 1, name);
  if (fstatat(root_fd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) snprintf(base, size, "%s/%s", FORK_DIR + 1, name);
}

/* One set of clones of the shared layer NAME attached here (attached_dir): the places' mask in
 * mask, the descriptors in out; how many, or -1 with errno. */
static int clone_attached(const char *name, char *mask, int *out) {
  char p[PATH_MAX], base[PATH_MAX];
  struct stat st;
  int n = 0;
  attached_dir(name, base, sizeof base);
  for (int i = 0; i < N_SHARE; i++) {
    mask[i] = '0';
    snprintf(p, sizeof p, "%s/%s", base, share_places[i]);
    if (fstatat(root_fd, p, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
    int c = (int)syscall(SYS_open_tree, root_fd, p, OPEN_TREE_CLONE | O_CLOEXEC);
    if (c < 0) {
      int err = errno;
      close_fds(out, n);
      errno = err;
      return -1;
    }
    out[n++] = c;
    mask[i] = '1';
  }
  mask[N_SHARE] = 0;
  return n;
}

/* The helper of 'W' (in the generation's mount namespace): COUNT sets of clones of the templates,
 * each sent to PID 1 as its mask (N_SHARE + 1 bytes) with its descriptors; an errno (an int) ends it. */
static void share_helper(int sock, unsigned long long count) {
  if (setns(gen_mnt, CLONE_NEWNS) < 0) {
    int err = errno;
    if (write(sock, &err, sizeof err) < 0) _exit(3);
    _exit(1);
  }
  for (unsigned long long k = 0; k < count; k++) {
    int out[N_SHARE], n = 0;
    char mask[N_SHARE + 1] = {0};
    for (int i = 0; i < N_SHARE; i++) {
      mask[i] = '0';
      int c;
      struct stat st;
      if (gen_tpl_kind[i] == TPL_UPPER) {
        c = (int)syscall(SYS_open_tree, gen_tpl[i], "u", OPEN_TREE_CLONE | O_CLOEXEC);
      } else if (gen_tpl_kind[i] == TPL_PLAIN) { /* the tmpfs mounted there (the commands mount nothing) */
        c = (int)syscall(SYS_open_tree, gen_root, share_dirs[i], OPEN_TREE_CLONE | O_CLOEXEC | AT_SYMLINK_NOFOLLOW);
        if (c >= 0 && (fstat(c, &st) < 0 || st.st_dev != gen_plain_dev[i])) {
          close(c);
          c = -1;
          errno = EIO;
        }
      } else {
        continue;
      }
      struct sl_mount_attr at = {SL_MOUNT_ATTR_RDONLY | SL_MOUNT_ATTR_NOSUID | SL_MOUNT_ATTR_NODEV, 0, 0, 0};
      if (c < 0 || syscall(SYS_mount_setattr, c, "", AT_EMPTY_PATH, &at, sizeof at) < 0) {
        int err = errno;
        if (write(sock, &err, sizeof err) < 0) _exit(3);
        _exit(2);
      }
      out[n++] = c;
      mask[i] = '1';
    }
    if (send_with_fds(sock, mask, N_SHARE + 1, NULL, 0, out, n) < 0) _exit(4);
    close_fds(out, n);
  }
  _exit(0);
}

void do_share(uint32_t id, const char *payload) {
  char what[LAYER_ID_MAX + 1];
  unsigned long long count;
  const char *sp = strchr(payload, ' ');
  if (!sp || sp == payload || (size_t)(sp - payload) > LAYER_ID_MAX || parse_number(sp + 1, &count) < 0 ||
      count < 1 || count > 1024) {
    send_errno(id, EINVAL);
    return;
  }
  memcpy(what, payload, (size_t)(sp - payload));
  what[sp - payload] = 0;
  if (opts.landlock) {
    send_errno(id, EOPNOTSUPP);
    return;
  }
  if (strcmp(what, "0") != 0 && strcmp(what, "1") != 0) { /* NAME: a shared layer attached here */
    if (!layer_name_ok(what, strlen(what)) || !is_attached(what)) {
      send_errno(id, ENOENT);
      return;
    }
    for (unsigned long long k = 0; k < count; k++) {
      int out[N_SHARE];
      char mask[N_SHARE + 1];
      int n = clone_attached(what, mask, out);
      if (n < 0) {
        send_errno(id, errno);
        return;
      }
      send_frame_fds(REP_FD, id, mask, N_SHARE, out, n);
      close_fds(out, n);
    }
    return;
  }
  int any = 0;
  for (int i = 0; i < N_SHARE; i++) any |= gen_tpl_kind[i] != TPL_NONE;
  if (!any || gen_mnt < 0 || gen_root < 0) {
    send_errno(id, EOPNOTSUPP);
    return;
  }
  if (what[0] == '1') kill_generation();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
    send_errno(id, errno);
    return;
  }
  pid_t h = fork();
  if (h < 0) {
    int err = errno;
    close(sv[0]), close(sv[1]);
    send_errno(id, err);
    return;
  }
  if (h == 0) share_helper(sv[1], count);
  close(sv[1]);
  int err = 0;
  for (unsigned long long k = 0; k < count && !err; k++) {
    char buf[16];
    int fds[MAX_FDS], nfds = 0;
    ssize_t got = recv_fds(sv[0], buf, sizeof buf, fds, &nfds);
    int want = 0;
    for (int i = 0; got == N_SHARE + 1 && i < N_SHARE; i++) want += buf[i] == '1';
    if (got != N_SHARE + 1 || nfds != want) {
      err = got == (ssize_t)sizeof(int) ? *(int *)buf : EIO;
      close_fds(fds, nfds);
      break;
    }
    send_frame_fds(REP_FD, id, buf, N_SHARE, fds, nfds);
    close_fds(fds, nfds);
  }
  close(sv[0]);
  int status = 0;
  while (waitpid(h, &status, __WALL) < 0 && errno == EINTR) {
  }
  if (err) send_errno(id, err); /* (after the sets sent so far: the host closes them) */
}

/* At the first attach: a mount namespace of our own user namespace's (bwrap's belongs to its
 * outer one with --disable-userns: nothing could be mounted in it), with a tmpfs of our own at
 * FORK_DIR (bwrap's root is read-only).  Every later generation starts as a copy of it. */
static int fork_dir(void) {
  int err = 0, nroot = -1, nproc = -1;
  if (fchdir(root_fd) < 0) return -1;
  if (unshare(CLONE_NEWNS) < 0) { /* (our root and cwd move to the new namespace's copies) */
    err = errno;
  } else if ((nroot = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
             (nproc = openat(nroot, "proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
    die("reopening / and /proc in our mount namespace"); /* the old descriptors name mounts we left */
  } else {
    close(root_fd), close(proc_fd);
    root_fd = nroot, proc_fd = nproc;
    if (mount("sandboxlite", FORK_DIR + 1, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=1m,mode=0700") < 0)
      err = errno;
    else
      fork_dir_ready = 1;
  }
  if (fchdir(proc_fd) < 0) die("back to /proc");
  errno = err;
  return err ? -1 : 0;
}

void do_attach(uint32_t id, const char *payload, size_t plen, int *fds, int nfds) {
  size_t len = strnlen(payload, plen);
  const char *mask = payload + len + 1;
  int want = 0, raw = 0;
  if (opts.landlock) {
    send_errno(id, EOPNOTSUPP);
    return;
  }
  if (len == plen || !layer_name_ok(payload, len) || plen < len + 1 + N_SHARE + 1 || mask[N_SHARE] != 0) {
    send_errno(id, EINVAL);
    return;
  }
  if (plen > len + 1 + N_SHARE + 1) { /* "raw": a copy only to clone from (NAME is attached) */
    raw = plen == len + 1 + N_SHARE + 1 + 4 && memcmp(mask + N_SHARE + 1, "raw", 4) == 0;
    if (!raw) {
      send_errno(id, EINVAL);
      return;
    }
  }
  for (int i = 0; i < N_SHARE; i++) {
    if (mask[i] != '0' && mask[i] != '1') {
      send_errno(id, EINVAL);
      return;
    }
    want += mask[i] == '1';
  }
  if (want != nfds || is_attached(payload) != raw) {
    send_errno(id, want != nfds ? EINVAL : raw ? ENOENT : EEXIST);
    return;
  }
  char p[PATH_MAX];
  if (!fork_dir_ready && fork_dir() < 0) {
    send_errno(id, errno);
    return;
  }
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/%s%s", FORK_DIR + 1, payload, raw ? "/raw" : "");
  if (mkdirat(root_fd, dir, 0700) < 0) {
    send_errno(id, errno);
    return;
  }
  for (int i = 0, k = 0; i < N_SHARE; i++) {
    if (mask[i] != '1') continue;
    snprintf(p, sizeof p, "%s/%s", dir, share_places[i]);
    if (mkdirat(root_fd, p, 0700) < 0 ||
        syscall(SYS_move_mount, fds[k++], "", root_fd, p, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
      send_errno(id, errno); /* (what was attached stays: the name is taken) */
      return;
    }
  }
  send_str(REP_OK, id, "");
}

/* Before a new generation: the shared layers it is not built over are unmounted (the kernel frees
 * a shared tmpfs with its last mount: the old generation's are gone with its processes). */
void detach_unused(void) {
  if (!fork_dir_ready) return;
  DIR *dir = dir_at(root_fd, FORK_DIR + 1);
  if (!dir) return;
  struct dirent *e;
  while ((e = readdir(dir))) {
    if (!layer_name_ok(e->d_name, strlen(e->d_name))) continue;
    int used = 0;
    for (int i = 0; i < n_layers && !used; i++) used = strcmp(layers[i], e->d_name) == 0;
    if (used) continue;
    char p[PATH_MAX], name[LAYER_ID_MAX + 1];
    snprintf(name, sizeof name, "%s", e->d_name);
    for (int i = 0; i < 2 * N_SHARE; i++) {
      snprintf(p, sizeof p, "%s/%s/%s%s", FORK_DIR + 1, name, i < N_SHARE ? "" : "raw/", share_places[i % N_SHARE]);
      if (fchdir(root_fd) == 0) {
        umount2(p, MNT_DETACH);
        rmdir(p);
      }
    }
    snprintf(p, sizeof p, "%s/%s/raw", FORK_DIR + 1, name);
    if (fchdir(root_fd) == 0) rmdir(p);
    snprintf(p, sizeof p, "%s/%s", FORK_DIR + 1, name);
    if (fchdir(root_fd) == 0 && rmdir(p) == 0) rewinddir(dir); /* (the directory changed under the walk) */
  }
  closedir(dir);
  if (fchdir(proc_fd) < 0) die("back to /proc");
}
