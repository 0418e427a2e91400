/*
 * sandboxlite executor: PID 1 of every jail.
 *
 * Where it runs.  bwrap starts it (--as-pid-1) in new user, PID, mount, IPC,
 * UTS and cgroup namespaces (and a network namespace of its own), as uid 0 of
 * the sandbox's user namespace with every capability *of that namespace*
 * (--cap-add ALL): none over the host, whose namespaces are owned by another
 * user namespace.  bwrap has set no_new_privs; the executor itself has no
 * seccomp filter.  It keeps those capabilities because it builds, at start and
 * on every reset, the filesystem the commands see (mount namespaces, tmpfs, an
 * overlay, pivot_root): that is what makes a reset take about a millisecond
 * without a new jail.  Nothing the sandbox runs ever holds them (below).  It
 * lives chrooted in /proc, keeping the jail's root and /proc by descriptor, so
 * its mount table (readable by anyone as /proc/1/mountinfo) names no host
 * path; it is not dumpable (its memory, descriptors and root are closed to the
 * commands), ptrace is filtered for them, and as init of the PID namespace it
 * gets no signal from inside that it has no handler for.
 *
 * The processes.
 *   PID 1 (this program, unconfined in the user namespace) talks to the host
 *     over one unix stream socket (ctrl=FD, 3 by default) and reaps orphans.
 *   G, once per generation: a child that unshares a mount namespace (and an
 *     IPC namespace: no SysV or POSIX IPC object outlives its generation), builds it
 *     (a copy-on-write overlay over the image with lower=, writes in a
 *     size-capped tmpfs; else a bind of the jail's read-only root, rootro=1),
 *     fresh size-capped tmpfs on /tmp, /testbed, /dev/shm (and /root without
 *     an overlay), the caller's mounts again over an overlay (bind=), a devpts
 *     instance holding at most ptys= terminals, a workdir (wtmpfs=, mkdir=),
 *     pivots into it and exits.  PID 1 keeps the namespaces and the root by
 *     descriptor.
 *   Z, the zygote, once per generation: forked by PID 1, it joins the
 *     generation, sets no_new_privs, empties every capability set (bounding and
 *     ambient included) and loads the seccomp filter (seccomp=FD) once
 *     (confine_self).  On PID 1's request it clones a standby supervisor with
 *     CLONE_PARENT (so PID 1's child, reaped and signalled by it) and passes its
 *     socket back; the standby inherits the confinement for the price of a fork.
 *   S, a supervisor per command: a standby handed one spawn request, or, when
 *     no zygote can be had (a command killed or stopped it), a child PID 1 forks
 *     that confines itself the same way before anything else.  S is a child
 *     subreaper: it vforks the command C and every process C leaves behind,
 *     double-forked daemons included, is re-parented to S while S lives, so a
 *     kill reaches the whole tree.  S reports C's wait status ('X') on the
 *     control socket itself and exits 0; any other end of S makes PID 1 report.
 *   When the host's end of the socket closes (close(), or the host died) PID 1
 *   exits and the kernel kills every process of the PID namespace.
 *
 * Trust.  The executor never trusts the sandboxed code (which runs as the
 * same uid and can signal Z and S: PID 1 sends them SIGCONT and drops a silent
 * zygote), and the host never trusts the executor (frames are size-checked,
 * every descriptor is fstat'ed before use).
 *
 * Wire format, both directions: u32 length (of what follows: 5 + payload),
 * u8 type, u32 id, payload; little-endian (host and jail share the machine).
 * Descriptors ride with the first byte (SCM_RIGHTS, at most MAX_FDS).
 * Strings in payloads are NUL-terminated, numbers are decimal text.
 * Requests (host -> executor, payload at most MAX_REQUEST_PAYLOAD):
 *   'S' spawn    flags, cwd, argc, argv..., env... with the SP_* descriptors
 *                (in flag order; SP_STATUS's becomes the command's fd 3);
 *                no reply on success, then 'X'; 'E' if it cannot start
 *   'K' kill     "all" (the command's tree) or "desc FLOOR" (what the command
 *                started after pid FLOOR, not the command: a shell's timeout);
 *                no reply
 *   'O' open     flags (O_* | OP_*), mode, path, resolved in the generation's
 *                root: 'F' with the descriptor (empty payload) or 'E'
 *   'M' mkdir    mode, path (mkdir -p): 'R' or 'E'
 *   'Y' symlink  target, path: 'R' or 'E'
 *   'D' sink     no payload; the attached pipes are drained and discarded
 *   'L' last pid no payload: 'R' with the namespace's last pid
 *   'Z' reset    the layers (top first; none: the image): every process killed,
 *                a new generation over them; 'R' or 'E'
 *   'P' snapshot "MAX_BYTES" [" NAME"] and an empty directory: the generation's
 *                writes (or the shared layer NAME) copied there; see "snapshots"
 *   'W' share    "1 COUNT", "0 COUNT" or "NAME COUNT": COUNT 'F' frames, each a
 *                mask of places and their detached mounts; see "sharing"
 *   'A' attach   NAME, MASK (and "raw") with such a set: 'R' or 'E'
 *   'T' loopback "listen PORT" or "connect PORT": a TCP socket on 127.0.0.1
 *                in the sandbox's network namespace, listening or connecting
 *                (non-blocking: the host waits for it); 'F' with it or 'E'.
 *                The host serves the sandbox's egress proxy and exposed ports
 *                through these; refused (EPERM) without a namespace (Landlock)
 *   'U' connector one descriptor attached (a unix stream socket): a second,
 *                narrow channel on which only 'T' is served, so that a host
 *                thread can ask for connections while another waits on this
 *                one; 'R', or 'E' without exactly one descriptor.  A new one
 *                replaces the old; its hang-up only drops it
 * Replies and events (executor -> host, payload at most MAX_REPLY_PAYLOAD):
 *   'H' hello (id 0, HELLO_TEXT), 'E' errno, 'F' descriptor, 'R' ok (empty, or
 *   the pid for 'L'), 'X' wait status of a spawned command.
 * The host stops the executor by closing the socket: there is no quit request.
 *
 * Options: KEY=VALUE arguments (opt_specs below), all parsed and checked before
 * anything is done; an unknown key, a malformed value, a repeated single key or
 * more values than a key's limit exit EXIT_BAD_OPTION with a message.
 * "launch ..." as the first argument is the launcher mode instead (see launch),
 * "netns" the maker of network namespaces (see serve_netns), "userns" the
 * holder of a user namespace while its maps are written (see hold_userns).
 *
 * The protocol block below is checked against sandboxlite/protocol.py (the one
 * source of truth) by tests/test_protocol.py: change both together.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* ---- the protocol (mirrors sandboxlite/protocol.py; one definition per line) ---- */

#define HELLO_TEXT "sandboxlite-executor 6"
#define CTRL_FD 3                       /* the control socket unless ctrl=N */
#define MAX_REQUEST_PAYLOAD (16u << 20) /* a bigger request ends the jail (launch.MAX_SPAWN_BYTES) */
#define MAX_REPLY_PAYLOAD 4096u         /* what we send is far smaller */
#define MAX_FDS 8                       /* descriptors per frame */

enum request {
  REQ_SPAWN = 'S',
  REQ_KILL = 'K',
  REQ_OPEN = 'O',
  REQ_MKDIR = 'M',
  REQ_SYMLINK = 'Y',
  REQ_SINK = 'D',
  REQ_LAST_PID = 'L',
  REQ_RESET = 'Z',
  REQ_LOOPBACK = 'T',
  REQ_CONNECTOR = 'U',
  REQ_SNAPSHOT = 'P',
  REQ_SHARE = 'W',
  REQ_ATTACH = 'A',
};

enum reply {
  REP_HELLO = 'H',
  REP_ERROR = 'E',
  REP_FD = 'F',
  REP_OK = 'R',
  REP_EXIT = 'X',
};

/* spawn flags */
#define SP_STDIN 1u  /* an fd for stdin is attached, else /dev/null */
#define SP_STDOUT 2u /* an fd for stdout is attached, else /dev/null */
#define SP_STDERR 4u /* an fd for stderr is attached, else /dev/null */
#define SP_STATUS 8u /* an fd the command gets as 3 (a shell's status channel), else 3 is closed */

/* open flags of our own, above the kernel's O_* bits we forward */
#define OP_MKPARENTS 0x40000000u
#define OP_REQ_REG 0x20000000u
#define OP_REQ_DIR 0x10000000u
#define OP_KERNEL_MASK 0x0fffffffu

/* kill requests */
#define KILL_ALL "all"
#define KILL_DESC "desc"

/* exit codes of the executor itself */
#define EXIT_BAD_OPTION 110 /* an unknown, malformed, repeated or excess option */
#define EXIT_FATAL 111      /* a system call the executor cannot do without failed */
#define EXIT_RLIMIT 112     /* setrlimit refused an rlimit option */
#define EXIT_SETUP 113      /* building a generation, or confining a process, failed */

/* per-key limits of the options */
#define MAX_BINDS 64 /* bind=: caller mounts carried into an overlay root */
#define MAX_WTMPFS 8 /* wtmpfs=: extra tmpfs (a workdir outside the writable places) */
#define MAX_MKDIRS 8 /* mkdir=: directories to create (a workdir inside a writable place) */
#define MAX_RULES 64 /* ro=, rw=: paths a Landlock sandbox reads (and writes) beneath */
#define MAX_OWN 8    /* own=: a Landlock sandbox's own directories (emptied at every generation) */
#define MAX_DEVRW 16 /* devrw=: device files a Landlock sandbox reads and writes */
#define MAX_LAYERS 32 /* layer=: snapshot layers a generation starts from (and a reset's list) */
#define LAYER_ID_MAX 64 /* a layer's name: 1 to 64 lowercase hex digits (a sha256) */
#define SNAPS_PATH_MAX 64 /* snaps=: short, so that MAX_LAYERS layers fit one overlay's options */
#define OPTION_PATH_MAX 4032 /* the longest path option: PATH_MAX, less room for the generation's prefix */

enum opt_kind { OPT_FD, OPT_SIZE, OPT_PATH, OPT_FLAG, OPT_COUNT, OPT_RLIMIT, OPT_NAME };
enum opt_id {
  O_CTRL, O_EXE, O_SECCOMP, O_LOWER, O_UPPER, O_TMP, O_TESTBED, O_BIND, O_WTMPFS, O_DEVDIR, O_ROOTRO, O_MKDIR,
  O_PTYS, O_SNAPS, O_LAYER, O_DEFER, O_LANDLOCK, O_RO, O_RW, O_OWN, O_DEVRW, O_NET, O_CPU, O_AS, O_FSIZE, O_NPROC, O_NOFILE, O_CORE,
  O_STACK, N_OPTS
};
static const struct opt_spec {
  const char *key;
  enum opt_kind kind;
  int max; /* how many times it may be given */
} opt_specs[N_OPTS] = {
  [O_CTRL] = {"ctrl", OPT_FD, 1},          /* the control socket */
  [O_EXE] = {"exe", OPT_FD, 1},            /* the descriptor we were executed through: closed */
  [O_SECCOMP] = {"seccomp", OPT_FD, 1},    /* the BPF program (required) */
  [O_LOWER] = {"lower", OPT_PATH, 1},      /* the image: a copy-on-write root over it */
  [O_UPPER] = {"upper", OPT_SIZE, 1},      /* bytes the copy-on-write layer may take */
  [O_TMP] = {"tmp", OPT_SIZE, 1},          /* bytes of /tmp, /dev/shm (and /root) */
  [O_TESTBED] = {"testbed", OPT_SIZE, 1},  /* bytes of /testbed and wtmpfs=; 0: no /testbed tmpfs */
  [O_BIND] = {"bind", OPT_PATH, MAX_BINDS},
  [O_WTMPFS] = {"wtmpfs", OPT_PATH, MAX_WTMPFS},
  [O_DEVDIR] = {"devdir", OPT_FLAG, 1},    /* /dev is a ready-made directory: devpts per generation */
  [O_ROOTRO] = {"rootro", OPT_FLAG, 1},    /* make the generation's bind of the jail's root read-only */
  [O_MKDIR] = {"mkdir", OPT_PATH, MAX_MKDIRS},
  [O_PTYS] = {"ptys", OPT_COUNT, 1},       /* the generation's devpts instance holds at most this many */
  [O_SNAPS] = {"snaps", OPT_PATH, 1},      /* where the snapshot store is bound (read-only): layers by name */
  [O_LAYER] = {"layer", OPT_NAME, MAX_LAYERS}, /* the first generation's snapshot layers, top first */
  [O_DEFER] = {"defer", OPT_FLAG, 1},      /* no generation until the first 'Z' (after 'A': a fork's child) */
  [O_LANDLOCK] = {"landlock", OPT_FLAG, 1}, /* no namespaces: a Landlock domain (see "Landlock mode") */
  [O_RO] = {"ro", OPT_PATH, MAX_RULES},    /* Landlock: read and execute beneath (skipped when missing) */
  [O_RW] = {"rw", OPT_PATH, MAX_RULES},    /* Landlock: read, write and execute beneath */
  [O_OWN] = {"own", OPT_PATH, MAX_OWN},    /* Landlock: the sandbox's own directory, emptied every generation */
  [O_DEVRW] = {"devrw", OPT_PATH, MAX_DEVRW}, /* Landlock: a device file read and written (/dev/null) */
  [O_NET] = {"net", OPT_FLAG, 1},          /* Landlock: TCP bind and connect are not restricted */
  [O_CPU] = {"cpu", OPT_RLIMIT, 1},        /* rlimits: a number in the resource's unit, or inf */
  [O_AS] = {"as", OPT_RLIMIT, 1},
  [O_FSIZE] = {"fsize", OPT_RLIMIT, 1},
  [O_NPROC] = {"nproc", OPT_RLIMIT, 1},
  [O_NOFILE] = {"nofile", OPT_RLIMIT, 1},
  [O_CORE] = {"core", OPT_RLIMIT, 1},
  [O_STACK] = {"stack", OPT_RLIMIT, 1},
};

/* ---- end of the protocol ------------------------------------------------- */

_Static_assert(OPTION_PATH_MAX + 64 <= PATH_MAX, "room for the generation's prefix");

static const int opt_rlimit[N_OPTS] = {[O_CPU] = RLIMIT_CPU, [O_AS] = RLIMIT_AS, [O_FSIZE] = RLIMIT_FSIZE,
                                       [O_NPROC] = RLIMIT_NPROC, [O_NOFILE] = RLIMIT_NOFILE,
                                       [O_CORE] = RLIMIT_CORE, [O_STACK] = RLIMIT_STACK};

/* The options, parsed (parse_options) before any of them is acted on. */
static struct options {
  int ctrl, exe, seccomp;  /* descriptors; exe and seccomp -1 when absent */
  const char *lower;       /* overlay lower dir (the image), or NULL */
  const char *snaps;       /* the snapshot store (snaps=), or NULL */
  unsigned long long upper, tmp, testbed;
  int devdir, rootro, defer, landlock, net;
  unsigned ptys;           /* devpts max= */
  const char *binds[MAX_BINDS];
  const char *ro[MAX_RULES], *rw[MAX_RULES], *own[MAX_OWN], *devrw[MAX_DEVRW];
  const char *wtmpfs[MAX_WTMPFS];
  const char *mkdirs[MAX_MKDIRS];
  int n[N_OPTS];           /* how many times each key was given */
  rlim_t rlimit[N_OPTS];   /* the value of each rlimit option given */
} opts = {.ctrl = CTRL_FD, .exe = -1, .seccomp = -1, .upper = 1ull << 30, .tmp = 1ull << 30,
          .testbed = 2ull << 30, .ptys = 64};

extern char **environ;

/* The snapshot layers the next generation is built over (top first): layer= at start, then each
 * reset's list.  Names only: the layers are directories of the store bound at opts.snaps. */
static char layers[MAX_LAYERS][LAYER_ID_MAX + 1];
static int n_layers;

static int layer_name_ok(const char *v, size_t len) {
  if (len == 0 || len > LAYER_ID_MAX) return 0;
  for (size_t i = 0; i < len; i++)
    if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f'))) return 0;
  return 1;
}

static int ctrl = CTRL_FD; /* opts.ctrl, once the options are read */

struct child {
  uint32_t id;
  pid_t pid;
};
static struct child *children;
static size_t n_children, cap_children;

static struct pollfd *pfds;
static size_t n_sinks, cap_sinks; /* pfds[0] = ctrl, pfds[1] = signalfd, pfds[2] = the connector */
#define SINK0 3                     /* pfds[SINK0 ...]: the sinks */

static void die(const char *what) {
  dprintf(2, "sandboxlite-executor: %s: %s\n", what, strerror(errno));
  _exit(EXIT_FATAL);
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int read_all(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t n = read(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* Send hdr then payload on a stream socket, the descriptors riding with the
 * first byte; finishes a partial write.  0, or -1 when the peer has gone. */
static int send_with_fds(int sock, const void *hdr, size_t hlen, const void *payload, size_t plen, const int *fds,
                         int nfds) {
  struct iovec iov[2] = {{(void *)hdr, hlen}, {(void *)payload, plen}};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  } cm;
  struct msghdr msg = {0};
  msg.msg_iov = iov;
  msg.msg_iovlen = plen ? 2 : 1;
  if (nfds > 0) {
    memset(&cm, 0, sizeof cm);
    msg.msg_control = cm.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return -1;
  size_t done = (size_t)n;
  if (done < hlen) {
    if (write_all(sock, (const char *)hdr + done, hlen - done) < 0) return -1;
    done = hlen;
  }
  return write_all(sock, (const char *)payload + (done - hlen), plen - (done - hlen));
}

/* One recvmsg of at most size bytes and the descriptors that came with them (close-on-exec):
 * the bytes received (0 at end of file), or -1. */
static ssize_t recv_fds(int sock, void *buf, size_t size, int *fds, int *nfds) {
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
  } cm;
  struct iovec iov = {buf, size};
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = cm.buf;
  msg.msg_controllen = sizeof cm.buf;
  ssize_t n;
  do n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  *nfds = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k && *nfds < MAX_FDS; i++) memcpy(&fds[(*nfds)++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
    }
  return n;
}

/* Receive exactly hlen header bytes, and the descriptors that came with them
 * (close-on-exec).  0, or -1 on end of file or error. */
static int recv_with_fds(int sock, void *hdr, size_t hlen, int *fds, int *nfds) {
  ssize_t n = recv_fds(sock, hdr, hlen, fds, nfds);
  if (n <= 0) return -1;
  if ((size_t)n < hlen && read_all(sock, (char *)hdr + n, hlen - (size_t)n) < 0) return -1;
  return 0;
}

/* Send one frame, optionally with one descriptor attached. */
static void send_frame_fds(char type, uint32_t id, const void *payload, uint32_t plen, const int *fds, int nfds) {
  char hdr[9];
  if (plen > MAX_REPLY_PAYLOAD) _exit(EXIT_FATAL); /* the host would drop the jail anyway */
  uint32_t len = 5 + plen;
  memcpy(hdr, &len, 4);
  hdr[4] = type;
  memcpy(hdr + 5, &id, 4);
  /* the host gone; a connector that has gone is only dropped (its hang-up is polled) */
  if (send_with_fds(ctrl, hdr, 9, payload, plen, fds, nfds) < 0 && ctrl == opts.ctrl) _exit(0);
}

static void send_frame(char type, uint32_t id, const void *payload, uint32_t plen, int fd) {
  send_frame_fds(type, id, payload, plen, &fd, fd >= 0 ? 1 : 0);
}

static void send_str(char type, uint32_t id, const char *s) {
  send_frame(type, id, s, (uint32_t)strlen(s), -1);
}

static void send_errno(uint32_t id, int err) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", err);
  send_str(REP_ERROR, id, buf);
}

/* ---- supervisor: kill a process tree ------------------------------------ */

/* Parent pid from /proc/pid/stat. */
static int read_stat(pid_t pid, pid_t *ppid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* comm may hold spaces and parens */
  if (!p) return -1;
  int pp;
  char state;
  /* fields after comm: 3 state, 4 ppid */
  if (sscanf(p + 1, " %c %d", &state, &pp) != 2) return -1;
  *ppid = (pid_t)pp;
  return 0;
}

#define MAX_SCAN 8192

/* SIGKILL every descendant of `root` except `spare`, and except processes
 * with a pid <= `floor` (the namespace's last pid when the current shell
 * command started: they belong to earlier commands).  Pids in a fresh PID
 * namespace only grow (pid_max is millions).  Returns how many were signalled. */
static int sweep(pid_t root, pid_t spare, pid_t floor) {
  static pid_t pids[MAX_SCAN], ppids[MAX_SCAN];
  static char mark[MAX_SCAN];
  int n = 0;
  DIR *d = opendir("/proc");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < MAX_SCAN) {
    char *end;
    long v = strtol(e->d_name, &end, 10);
    if (*end || v <= 0) continue;
    if (read_stat((pid_t)v, &ppids[n]) < 0) continue;
    pids[n] = (pid_t)v;
    n++;
  }
  closedir(d);
  /* mark descendants of root: repeat until no change (trees are shallow) */
  memset(mark, 0, (size_t)n);
  int changed = 1, killed = 0;
  while (changed) {
    changed = 0;
    for (int i = 0; i < n; i++) {
      if (mark[i]) continue;
      int parent_marked = ppids[i] == root;
      for (int j = 0; !parent_marked && j < n; j++)
        if (mark[j] && pids[j] == ppids[i]) parent_marked = 1;
      if (parent_marked) {
        mark[i] = 1;
        changed = 1;
      }
    }
  }
  for (int i = 0; i < n; i++) {
    if (!mark[i] || pids[i] == spare || pids[i] <= floor) continue;
    if (kill(pids[i], SIGKILL) == 0) killed++;
  }
  return killed;
}

/* S reports the command's wait status to the host itself (one hop less than
 * going through the executor), then exits 0, which tells the executor that
 * the report was made.  Any other end of S makes the executor report. */
static uint32_t s_id;

static void report_exit(int status) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", status);
  send_str(REP_EXIT, s_id, buf);
  _exit(0);
}

/* The supervisor S of one command.  It never returns. */
static void supervise(pid_t cmd) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pid_t self = getpid();
  int cmd_status = 0, cmd_done = 0, killing_all = 0;
  for (;;) {
    /* reap everything that is ready */
    for (;;) {
      int st;
      pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
      if (p <= 0) {
        if (p < 0 && errno == ECHILD && killing_all) report_exit(cmd_done ? cmd_status : SIGKILL);
        break;
      }
      if (p == cmd) {
        cmd_status = st;
        cmd_done = 1;
        if (!killing_all) report_exit(st); /* background children go to PID 1 */
      }
    }
    if (killing_all) {
      /* keep sweeping until every descendant is gone */
      sweep(self, -1, 0);
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
      continue;
    }
    siginfo_t si;
    int sig = sigwaitinfo(&set, &si);
    if (sig == SIGTERM) {
      killing_all = 1;
      sweep(self, -1, 0);
    } else if (sig == SIGUSR1) {
      pid_t floor = (pid_t)si.si_value.sival_int;
      /* kill everything below S except the command itself (a shell), and
       * everything below the command; stop after two quiet sweeps or 2 s */
      int quiet = 0;
      for (int round = 0; round < 10000 && quiet < 2; round++) {
        int n = sweep(self, cmd, floor);
        for (;;) { /* reap our own zombies, not the command */
          int st;
          pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
          if (p <= 0) break;
          if (p == cmd) {
            cmd_status = st;
            cmd_done = 1;
            report_exit(st);
          }
        }
        quiet = n == 0 ? quiet + 1 : 0;
        struct timespec ts = {0, 200000};
        if (quiet < 2) nanosleep(&ts, NULL);
      }
    }
  }
}

/* ---- generations: the filesystem the commands see --------------------------
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

static int gen_mnt = -1, gen_root = -1, gen_ipc = -1;
static int gen_ws = -1; /* the generation's workspace (/.sl/gen: the root overlay's writes), O_PATH */
/* the tmpfs holding a place's writes when it is an overlay over snapshot layers (-1: a plain
 * tmpfs); by descriptor, as the workspace: once the old root is detached, paths reach neither */
enum { PL_TESTBED, PL_TMP, PL_HOME, N_PLACE_WS };
static int gen_pws[N_PLACE_WS] = {-1, -1, -1};
static int g_pws[N_PLACE_WS] = {-1, -1, -1}; /* G's own descriptors of them, for the report */
/* Templates for sharing (fork without a copy, 'W'): a detached clone (open_tree) of each tmpfs
 * holding the generation's writes that leaves every path when G pivots: the workspace (the root's
 * upper is its u/) and the places that are overlays (p-NAME/u), in SHARE_PLACES order; a place
 * that is a plain tmpfs stays mounted in the root.  Only a process in the generation's mount
 * namespace may clone them again (the kernel's rule for detached mounts). */
enum { SH_ROOT, SH_TESTBED, SH_TMP, SH_HOME, N_SHARE };
static const char *const share_places[N_SHARE] = {"root", "testbed", "tmp", "home"};
static int gen_tpl[N_SHARE] = {-1, -1, -1, -1};
/* TPL_UPPER: the writes are the template's u/ (an overlay's upper); TPL_PLAIN: no template, the
 * place is a plain tmpfs still mounted in the generation's root (cloned from there: each template
 * costs an expedited RCU grace period when it goes, on every reset and close); 0: not there */
enum { TPL_NONE, TPL_UPPER, TPL_PLAIN };
static int gen_tpl_kind[N_SHARE];
static dev_t gen_plain_dev[N_SHARE]; /* a TPL_PLAIN place's tmpfs, as the generation was built */
static const char *const share_dirs[N_SHARE] = {"", "testbed", "tmp", "root"}; /* where in the root */
static int g_tpl[N_SHARE] = {-1, -1, -1, -1}, g_tpl_kind[N_SHARE];
#define FORK_DIR "/.sl/fork" /* shared layers attached ('A'): FORK_DIR/NAME/PLACE, in PID 1's mount namespace */
static int fork_dir_ready;
/* The jail's whole root and its /proc.  The executor itself lives chrooted in /proc: a mount
 * table (/proc/PID/mountinfo, readable by any process) lists the mounts under its task's root,
 * and bwrap's mounts name host paths (the image, the host's /etc copy, the caller's mounts).
 * PID 1, and each supervisor until it joins the generation, show none of them. */
static int root_fd = -1, proc_fd = -1;
static struct sock_fprog filter;
static void make_standby(void);
static void drop_standby(void);
static void zygote_gone(void);

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

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x4
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
struct sl_mount_attr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};
#define SL_MOUNT_ATTR_RDONLY 0x1
#define SL_MOUNT_ATTR_NOSUID 0x2
#define SL_MOUNT_ATTR_NODEV 0x4

/* G: a detached clone of the tmpfs at path, for sharing; none (-1) when the kernel has no open_tree */
static void share_template(int which, const char *path) {
  g_tpl[which] = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE);
  g_tpl_kind[which] = g_tpl[which] >= 0 ? TPL_UPPER : TPL_NONE;
}

/* G: build the generation's mount namespace, pivot into it, report, wait. */
static void gen_child(int ready_w, int hold_r) {
  char root[] = "/.sl/gen/r", path[PATH_MAX];
  if (fchdir(root_fd) < 0 || chroot(".") < 0) gen_fail("back to the jail's root", NULL);
  /* a mount namespace, and an IPC namespace (SysV and POSIX IPC objects die with the generation) */
  if (unshare(CLONE_NEWNS | CLONE_NEWIPC) < 0) gen_fail("unshare", NULL);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) gen_fail("make private", "/");
  tmpfs_at("/.sl/gen", opts.lower ? opts.upper : (1 << 20), 0755);
  mkdir_p(root, 0755);
  if (opts.lower) {
    mkdir_p("/.sl/gen/u", 0755);
    mkdir_p("/.sl/gen/w", 0755);
    char lowers[PATH_MAX];
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
  } else {
    bind_at("/", root);
    if (opts.rootro && mount(NULL, root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
      gen_fail("read-only", root);
    if (opts.snaps) { /* the recursive bind copied the snapshot store: covered (a locked mount cannot go) */
      snprintf(path, sizeof path, "%s%s", root, opts.snaps);
      if (mount("sandboxlite", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0") < 0)
        gen_fail("covering", path);
    }
  }
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
  /* templates of the tmpfs holding the writes, for sharing ('W'; see gen_tpl) */
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


/* ---- Landlock mode (landlock=1) ----------------------------------------------
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
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
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

static int ll_ruleset = -1;
static int gen_ok; /* a generation is ready (either mode) */

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
static void landlock_start(void) {
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

/* A directory stream of `path` under `dfd` ("." for dfd itself); NULL with errno set. */
static DIR *dir_at(int dfd, const char *path) {
  int fd = openat(dfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d && fd >= 0) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return d;
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
static void kill_tree(void) {
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
static int ll_generation(void) {
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

/* The host has gone (or closed the sandbox): nothing of the sandbox may outlive it. */
static void quit(void) {
  if (opts.landlock) {
    kill_tree();
    ll_generation(); /* nothing is left for the host to remove but the directories */
  }
  _exit(0);
}

/* Build a new generation; returns 0, or -1 with errno set. */
static int new_generation(void) {
  if (opts.landlock) return ll_generation();
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
    gen_child(ready[1], hold[0]);
  }
  close(ready[1]);
  close(hold[0]);
  /* the old generation's templates: G holds the last copies now, and its exit dissolves them
   * (an expedited RCU grace period each: not on our way) */
  for (int i = 0; i < N_SHARE; i++) {
    if (gen_tpl[i] >= 0) close(gen_tpl[i]);
    gen_tpl[i] = -1;
  }
  char msg[160], path[64];
  ssize_t n;
  do n = read(ready[0], msg, sizeof msg - 1);
  while (n < 0 && errno == EINTR);
  close(ready[0]);
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
    /* the templates themselves (pidfd_getfd: the same open file; a detached tree is dissolved when
     * the file open_tree made is closed, so reopening /proc/G/fd/N would not keep it) */
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
    if (mnt < 0 || ipc < 0 || rootfd < 0 || wsfd < 0) err = errno ? errno : EIO;
  }
  close(hold[1]); /* G exits (reaped with the other orphans); the namespaces live on through our descriptors */
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

/* In a supervisor, before it forks the command: join the generation and
 * give up every privilege; the command inherits all of it.  Any failure ends
 * the process: nothing ever runs unconfined. */
static void confine_self(void) {
  int ok;
  if (opts.landlock) /* a layer of the executor's rules of its own (D2: see "Landlock mode") */
    ok = prctl(PR_SET_PDEATHSIG, SIGKILL) == 0 && syscall(SYS_landlock_restrict_self, ll_ruleset, 0) == 0;
  else
    ok = setns(gen_mnt, CLONE_NEWNS) == 0 && chdir("/") == 0 && setns(gen_ipc, CLONE_NEWIPC) == 0;
  ok = ok && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
  ok = ok && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0;
  /* without CAP_SETPCAP (Landlock mode runs as an unprivileged uid) the bounding set cannot
   * shrink; with no_new_privs and no capability in any other set it grants nothing */
  for (int cap = 0; ok && cap <= 63; cap++)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL && !(opts.landlock && errno == EPERM)) ok = 0;
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  ok = ok && syscall(SYS_capset, &hdr, data) == 0;
  ok = ok && syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) == 0;
  if (!ok) {
    dprintf(2, "sandboxlite-executor: cannot confine a supervisor: %s\n", strerror(errno));
    _exit(EXIT_SETUP);
  }
}

/* Open a path inside the generation's root: symlinks and ".." resolve there. */
static int open_in(const char *path, int flags, mode_t mode) {
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

static int load_filter(int fd) {
  static char buf[1 << 16];
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    n += (size_t)r;
    if (n == sizeof buf) return -1;
  }
  close(fd);
  if (n == 0 || n % sizeof(struct sock_filter)) return -1;
  filter.len = (unsigned short)(n / sizeof(struct sock_filter));
  filter.filter = (struct sock_filter *)buf;
  return 0;
}

/* Reset: kill every process of the sandbox, then a fresh generation over the snapshot layers the
 * payload names (NUL-terminated, top first; none: the image). */
static void close_fds(int *fds, int n);
static int parse_number(const char *s, unsigned long long *out);

/* Every process of the sandbox killed and reaped (PID 1 spared), and what served them dropped. */
static void kill_generation(void) {
  if (opts.landlock) {
    kill_tree();
  } else {
    kill(-1, SIGKILL); /* PID 1 itself is spared */
    for (;;) {
      pid_t p = waitpid(-1, NULL, __WALL);
      if (p < 0 && errno == EINTR) continue;
      if (p < 0) break;
    }
  }
  n_children = 0;
  drop_standby();
  zygote_gone(); /* killed above with everything else; the new generation gets its own */
  for (size_t i = 0; i < n_sinks; i++) close(pfds[SINK0 + i].fd);
  n_sinks = 0;
}

/* Is the shared layer NAME attached ('A')? */
static int is_attached(const char *name) {
  char p[PATH_MAX];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", FORK_DIR + 1, name);
  return fstatat(root_fd, p, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* ---- sharing: fork without a copy (namespaces only) -------------------------
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
/* Where the attached shared layer NAME's places are, relative to root_fd: its raw/ copy when it has
 * one (not idmapped: what to clone or copy from), else its own set. */
static void attached_dir(const char *name, char *base, size_t size) {
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

static void do_share(uint32_t id, const char *payload) {
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

static void do_attach(uint32_t id, const char *payload, size_t plen, int *fds, int nfds) {
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
static void detach_unused(void) {
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

static void do_reset(uint32_t id, const char *payload, size_t plen) {
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

/* ---- snapshots (namespaces only) -------------------------------------------
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

static int parse_number(const char *s, unsigned long long *out);

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
static void do_snapshot(uint32_t id, const char *payload, int *fds, int nfds) {
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

/* ---- requests ------------------------------------------------------------ */

/* Split a payload of NUL-terminated strings; returns count or -1. */
static int split(char *p, size_t len, char **out, int max) {
  int n = 0;
  size_t i = 0;
  while (i < len) {
    if (n == max) return -1;
    out[n++] = p + i;
    char *z = memchr(p + i, 0, len - i);
    if (!z) return -1;
    i = (size_t)(z - p) + 1;
  }
  return n;
}

static void close_fds(int *fds, int n) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

/* S: parse a spawn request, fork the command, supervise it.  Runs confined
 * (see confine_self); never returns. */
static void run_supervisor(uint32_t id, char *payload, size_t plen, int *fds, int nfds) {
  s_id = id;
  /* payload: flags, cwd, argc, argv..., env... */
  size_t maxf = plen + 4;
  char **f = malloc(sizeof(char *) * (maxf + 2));
  int n = f ? split(payload, plen, f, (int)maxf) : -1;
  int argc = n >= 3 ? atoi(f[2]) : -1;
  if (n < 3 || argc < 1 || 3 + argc > n) {
    send_errno(id, f ? EINVAL : ENOMEM);
    _exit(0);
  }
  unsigned flags = (unsigned)strtoul(f[0], NULL, 10);
  char *cwd = f[1];
  char **av = f + 3;
  char **env = f + 3 + argc;
  env[n - 3 - argc] = NULL; /* f has room for it */
  char **argv_copy = malloc(sizeof(char *) * (argc + 1));
  if (!argv_copy) {
    send_errno(id, ENOMEM);
    _exit(0);
  }
  memcpy(argv_copy, av, sizeof(char *) * argc);
  argv_copy[argc] = NULL;

  int want[4] = {-1, -1, -1, -1}, k = 0; /* stdin, stdout, stderr, fd 3: in flag order */
  for (int i = 0; i < 4; i++)
    if (flags & (1u << i)) want[i] = k < nfds ? fds[k++] : -1;
  if ((flags & SP_STATUS) && want[3] < 0) {
    send_errno(id, EINVAL);
    _exit(0);
  }
  /* fd 3's source out of the way of the dup2s onto 0..3 below */
  int status_src = want[3] >= 0 ? fcntl(want[3], F_DUPFD_CLOEXEC, 10) : -1;
  if (want[3] >= 0 && status_src < 0) {
    send_errno(id, errno);
    _exit(0);
  }

  /* signals stay blocked (inherited from the executor); add the ones we wait for */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigprocmask(SIG_BLOCK, &set, NULL);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  /* vfork: the child only makes system calls before execve (no allocation) */
  pid_t c = vfork();
  if (c < 0) {
    dprintf(want[2] >= 0 ? want[2] : 2, "sandboxlite: fork: %s\n", strerror(errno));
    report_exit(126 << 8);
  }
  if (c == 0) {
    /* C: the command */
    setsid();
    if (opts.landlock) prctl(PR_SET_PDEATHSIG, SIGKILL);
    int devnull = (want[0] < 0 || want[1] < 0 || want[2] < 0) ? open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
    for (int i = 0; i < 3; i++) {
      int src = want[i] >= 0 ? want[i] : devnull;
      if (src < 0 || (src == i ? fcntl(i, F_SETFD, 0) : dup2(src, i)) < 0) _exit(126);
    }
    if (status_src >= 0 && dup2(status_src, 3) < 0) _exit(126);
    /* dispositions are all default (nobody here installs handlers); the
     * mask is not: S blocks the signals it waits for */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    syscall(SYS_close_range, status_src >= 0 ? 4 : 3, ~0U, 0);
    if (chdir(cwd) < 0) {
      dprintf(2, "sandboxlite: cannot enter %s: %s\n", cwd, strerror(errno));
      _exit(126);
    }
    environ = env;
    execvp(argv_copy[0], argv_copy);
    int err = errno;
    dprintf(2, "sandboxlite: %s: %s\n", argv_copy[0], err == ENOENT ? "command not found" : strerror(err));
    _exit(err == ENOENT ? 127 : 126);
  }
  /* S keeps only the control socket */
  if (ctrl > 0) syscall(SYS_close_range, 0, (unsigned)ctrl - 1, 0);
  syscall(SYS_close_range, (unsigned)ctrl + 1, ~0U, 0);
  supervise(c);
}

/* A standby supervisor: a confined process that waits for the next spawn
 * request on its own socket, so that a command starts without paying for
 * confinement.  Standbys come from the zygote Z: a process forked once per
 * generation that joined the generation, dropped every capability and loaded
 * the seccomp filter (~0.2 ms, the filter's JIT most of it); each standby is
 * a clone of Z (CLONE_PARENT: it is still the executor's child, reaped and
 * signalled as before) and inherits all of that for the price of a fork.  Z
 * hands the standby's socket to the executor (SCM_RIGHTS).  A zygote that a
 * command killed is made again; when none can be had, a spawn forks its
 * supervisor from the executor and it confines itself (see do_spawn). */
static pid_t standby_pid = -1;
static int standby_fd = -1;
static pid_t zyg_pid = -1;
static int zyg_fd = -1;
static int standby_asked; /* the zygote owes us a standby */

/* A standby's life: wait for one request, then supervise that command. */
static void standby_serve(int sock) {
  if (opts.landlock) prctl(PR_SET_PDEATHSIG, SIGKILL); /* a clone's own: not inherited from the zygote */
  /* request: u32 id, u32 length, payload; descriptors with the first bytes */
  uint32_t hdr[2];
  int fds[MAX_FDS], nfds = 0;
  if (recv_with_fds(sock, hdr, sizeof hdr, fds, &nfds) < 0) _exit(0); /* the executor dropped us */
  char *payload = malloc((size_t)hdr[1] + 1);
  if (!payload || (hdr[1] && read_all(sock, payload, hdr[1]) < 0)) _exit(0);
  payload[hdr[1]] = 0;
  /* the handover's receipt (see hand_to_standby): from here on this process runs the request */
  char ok = 'k';
  if (send(sock, &ok, 1, MSG_NOSIGNAL) != 1) _exit(0);
  close(sock);
  run_supervisor(hdr[0], payload, hdr[1], fds, nfds);
}

/* Z: confined; keeps only the control socket (its standbys report on it) and its own. */
static void zygote_main(int sock) {
  if (sock != ctrl + 1 && dup2(sock, ctrl + 1) < 0) _exit(EXIT_SETUP);
  sock = ctrl + 1;
  /* 0-2 stay (as in the executor): descriptors a request brings must land above them */
  if (ctrl > 3) syscall(SYS_close_range, 3, (unsigned)ctrl - 1, 0);
  syscall(SYS_close_range, (unsigned)ctrl + 2, ~0U, 0);
  for (;;) {
    char c;
    ssize_t n = read(sock, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(0); /* the executor dropped us (reset, or it is gone) */
    int sv[2];
    int32_t pid = -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
      pid = (int32_t)syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
      if (pid == 0) {
        close(sock);
        close(sv[0]);
        standby_serve(sv[1]);
      }
      close(sv[1]);
      if (pid < 0) close(sv[0]);
    }
    int rc = send_with_fds(sock, &pid, sizeof pid, NULL, 0, pid > 0 ? &sv[0] : NULL, pid > 0 ? 1 : 0);
    if (pid > 0) close(sv[0]);
    if (rc < 0) _exit(0);
  }
}

static void zygote_gone(void) {
  if (zyg_fd >= 0) close(zyg_fd);
  zyg_fd = -1;
  zyg_pid = -1;
  standby_asked = 0;
}

/* Fork a child that confines itself, then runs body(its end of a new socket
 * pair) and never returns; 0 with *pid and *fd (our end), or -1. */
static int fork_confined(void (*body)(int), pid_t *pid, int *fd) {
  int sv[2];
  if (!gen_ok || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -1;
  pid_t p = fork();
  if (p < 0) {
    close(sv[0]), close(sv[1]);
    return -1;
  }
  if (p == 0) {
    close(sv[0]);
    confine_self();
    body(sv[1]);
    _exit(0);
  }
  close(sv[1]);
  *pid = p;
  *fd = sv[0];
  return 0;
}

static int make_zygote(void) { return fork_confined(zygote_main, &zyg_pid, &zyg_fd); }

/* Collect the standby the zygote owes us (it is usually ready long before
 * it is needed); 0 when there is one.  A zygote that does not answer within
 * 200 ms (stopped or killed from inside) is dropped. */
static int collect_standby(void) {
  if (!standby_asked) return standby_pid >= 0 ? 0 : -1;
  standby_asked = 0;
  struct pollfd pf = {zyg_fd, POLLIN, 0};
  int r;
  do r = poll(&pf, 1, 200);
  while (r < 0 && errno == EINTR);
  int32_t pid = -1;
  int fds[MAX_FDS], nfds = 0;
  int got = r == 1 && recv_with_fds(zyg_fd, &pid, sizeof pid, fds, &nfds) == 0;
  if (got && pid > 0 && nfds == 1) {
    standby_pid = pid;
    standby_fd = fds[0];
    return 0;
  }
  close_fds(fds, nfds);
  if (got && pid <= 0) return -1; /* it answered but could not clone now (process limit) */
  if (zyg_pid > 0) kill(zyg_pid, SIGKILL); /* silent, gone or garbled: drop it */
  zygote_gone();
  return -1;
}

/* Ask the zygote (made first if there is none) for the next standby.  When
 * that fails the next spawn forks and confines its supervisor itself. */
static void make_standby(void) {
  if (standby_pid >= 0 || standby_asked) return;
  for (int attempt = 0; attempt < 2; attempt++) { /* a dead zygote's socket refuses: make a new one */
    if (zyg_fd < 0 && make_zygote() < 0) return;
    kill(zyg_pid, SIGCONT); /* as for standbys: a command may have stopped it */
    if (send(zyg_fd, "s", 1, MSG_NOSIGNAL) == 1) {
      standby_asked = 1;
      return;
    }
    kill(zyg_pid, SIGKILL);
    zygote_gone();
  }
}

static void drop_standby(void) {
  if (standby_fd >= 0) close(standby_fd);
  standby_fd = -1;
  standby_pid = -1;
}

/* Hand a request to the standby supervisor: 0 when it has it, -1 when it could not take it (then
 * the caller starts the command another way), -2 when it did not say in STANDBY_RECEIPT_MS.
 * The standby acknowledges the request: a command that killed all it could (kill -9 -1) killed
 * the standby waiting for the next request too, and the socket of a process that is dying still
 * takes data, so without the receipt the next command was reported as killed by SIGKILL (exit
 * 137, no output) without ever running.  A standby that does not answer in time is killed and
 * the request fails (ETIMEDOUT), never run a second way: it might have started it. */
#define STANDBY_RECEIPT_MS 10000
static int hand_to_standby(uint32_t id, char *payload, size_t plen, int *fds, int nfds) {
  if (collect_standby() < 0) return -1;
  kill(standby_pid, SIGCONT); /* commands run as our uid: one may have stopped it */
  uint32_t hdr[2] = {id, (uint32_t)plen};
  if (send_with_fds(standby_fd, hdr, sizeof hdr, payload, plen, fds, nfds) < 0) {
    kill(standby_pid, SIGKILL); /* it died (or was killed from inside): forget it */
    drop_standby();
    return -1;
  }
  struct pollfd pf = {standby_fd, POLLIN, 0};
  int r;
  do r = poll(&pf, 1, STANDBY_RECEIPT_MS);
  while (r < 0 && errno == EINTR);
  char c = 0;
  ssize_t n = -1;
  if (r == 1) {
    do n = read(standby_fd, &c, 1);
    while (n < 0 && errno == EINTR);
  }
  if (n != 1 || c != 'k') {
    kill(standby_pid, SIGKILL);
    drop_standby();
    return r == 0 ? -2 : -1; /* silent: it may have the request; gone: it never had it */
  }
  close(standby_fd);
  standby_fd = -1;
  return 0;
}

static void add_child(uint32_t id, pid_t pid) {
  if (n_children == cap_children) {
    cap_children = cap_children ? cap_children * 2 : 16;
    children = realloc(children, sizeof *children * cap_children);
    if (!children) die("realloc");
  }
  children[n_children].id = id;
  children[n_children].pid = pid;
  n_children++;
}

static void do_spawn(uint32_t id, char *payload, size_t plen, int *fds, int nfds) {
  pid_t s;
  int rc = hand_to_standby(id, payload, plen, fds, nfds);
  /* the zygote's Landlock layer is the generation's: a supervisor that confined itself would be
   * in a layer of its own, whose commands could not signal the others'.  Wait for a standby: each
   * failed try dropped the standby or zygote that failed (a kill -9 -1 kills both, and the
   * zygote's socket may still take the request while it dies), so the next is a new one */
  for (int tries = 0; rc == -1 && opts.landlock && tries < 3; tries++) {
    make_standby();
    rc = hand_to_standby(id, payload, plen, fds, nfds);
  }
  if (rc == -2) {
    close_fds(fds, nfds);
    send_errno(id, ETIMEDOUT);
    make_standby();
    return;
  }
  int handed = rc == 0;
  if (handed) {
    s = standby_pid;
    standby_pid = -1;
  } else {
    s = fork();
    if (s < 0) {
      int err = errno;
      close_fds(fds, nfds);
      send_errno(id, err);
      return;
    }
    if (s == 0) {
      confine_self();
      run_supervisor(id, payload, plen, fds, nfds);
    }
  }
  close_fds(fds, nfds);
  add_child(id, s);
  make_standby(); /* for the next request: the zygote clones one meanwhile */
  /* no reply on success: the host learns the outcome from REP_EXIT */
}

/* KILL_ALL: kill the command and everything below it.
 * KILL_DESC " FLOOR": kill what the command started after pid FLOOR, not the
 * command.  Anything else kills it all, as the safe reading. */
static void do_kill(uint32_t id, const char *how) {
  for (size_t i = 0; i < n_children; i++)
    if (children[i].id == id) {
      if (strncmp(how, KILL_DESC " ", sizeof KILL_DESC) == 0) {
        union sigval v;
        v.sival_int = atoi(how + sizeof KILL_DESC);
        sigqueue(children[i].pid, SIGUSR1, v);
      } else {
        kill(children[i].pid, SIGTERM);
      }
      kill(children[i].pid, SIGCONT); /* a supervisor stopped from inside could not act on it */
      return;
    }
}

static void do_open(uint32_t id, char *payload, size_t plen) {
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

static void do_mkdir(uint32_t id, char *payload, size_t plen) {
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

static void do_symlink(uint32_t id, char *payload, size_t plen) {
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

static int parse_number(const char *s, unsigned long long *out);

/* 'T': a loopback TCP socket inside the sandbox's network namespace, for the host (never for a
 * command: only the host holds it).  PID 1 made no network namespace of its own under Landlock,
 * so there the request is refused: the socket would be the host's loopback. */
static void do_loopback(uint32_t id, char *payload, size_t plen) {
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

static void add_sink(int fd) {
  if (SINK0 + n_sinks == cap_sinks) {
    cap_sinks *= 2;
    pfds = realloc(pfds, sizeof *pfds * cap_sinks);
    if (!pfds) die("realloc");
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  pfds[SINK0 + n_sinks].fd = fd;
  pfds[SINK0 + n_sinks].events = POLLIN;
  pfds[SINK0 + n_sinks].revents = 0;
  n_sinks++;
}

static void drain_sinks(void) {
  static char junk[65536];
  for (size_t i = 0; i < n_sinks;) {
    struct pollfd *p = &pfds[SINK0 + i];
    if (p->revents) {
      ssize_t r = read(p->fd, junk, sizeof junk);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        close(p->fd);
        pfds[SINK0 + i] = pfds[SINK0 + n_sinks - 1];
        n_sinks--;
        continue;
      }
    }
    i++;
  }
}

static void reap(void) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG | __WALL);
    if (p <= 0) return;
    if (p == standby_pid) drop_standby(); /* killed from inside: the next spawn makes one */
    if (p == zyg_pid) zygote_gone();      /* likewise: standbys are forked here until then */
    for (size_t i = 0; i < n_children; i++)
      if (children[i].pid == p) {
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) { /* S did not get to report */
          char buf[32];
          snprintf(buf, sizeof buf, "%d", st);
          send_str(REP_EXIT, children[i].id, buf);
        }
        children[i] = children[--n_children];
        break;
      }
  }
}

static void drop_connector(void) {
  if (pfds[2].fd >= 0) close(pfds[2].fd);
  pfds[2].fd = -1; /* poll(2) skips it */
  pfds[2].revents = 0;
}

/* Read one request from ctrl; returns 0 on success, -1 when the host has gone.  ``narrow``: ctrl is
 * the connector, where only 'T' is served. */
static int handle_request(int narrow) {
  char hdr[9];
  int fds[MAX_FDS], nfds = 0;
  if (recv_with_fds(ctrl, hdr, sizeof hdr, fds, &nfds) < 0) return -1;
  uint32_t len, id;
  memcpy(&len, hdr, 4);
  memcpy(&id, hdr + 5, 4);
  char type = hdr[4];
  if (len < 5 || len - 5 > MAX_REQUEST_PAYLOAD) return -1;
  size_t plen = len - 5;
  char *payload = malloc(plen + 1);
  if (!payload) return -1;
  if (plen && read_all(ctrl, payload, plen) < 0) {
    free(payload);
    return -1;
  }
  payload[plen] = 0;
  /* descriptors travel in MSG_CMSG_CLOEXEC; the command's copies are dup2'd */
  if (narrow && type != REQ_LOOPBACK) type = 0; /* ENOSYS below */
  switch (type) {
    case REQ_SPAWN:
      do_spawn(id, payload, plen, fds, nfds);
      nfds = 0;
      break;
    case REQ_KILL:
      do_kill(id, payload);
      break;
    case REQ_OPEN:
      do_open(id, payload, plen);
      break;
    case REQ_MKDIR:
      do_mkdir(id, payload, plen);
      break;
    case REQ_SYMLINK:
      do_symlink(id, payload, plen);
      break;
    case REQ_RESET:
      do_reset(id, payload, plen);
      break;
    case REQ_SNAPSHOT:
      do_snapshot(id, payload, fds, nfds);
      break;
    case REQ_SHARE:
      do_share(id, payload);
      break;
    case REQ_ATTACH:
      do_attach(id, payload, plen, fds, nfds);
      break;
    case REQ_LOOPBACK:
      do_loopback(id, payload, plen);
      break;
    case REQ_CONNECTOR:
      if (nfds != 1) {
        send_errno(id, EINVAL);
        break;
      }
      drop_connector();
      pfds[2].fd = fds[0];
      nfds = 0;
      send_str(REP_OK, id, "");
      break;
    case REQ_LAST_PID: {
      char buf[32] = "0";
      int fd = openat(proc_fd, "sys/kernel/ns_last_pid", O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        ssize_t r = read(fd, buf, sizeof buf - 1);
        buf[r > 0 ? r : 0] = 0;
        close(fd);
      }
      buf[strcspn(buf, "\n")] = 0;
      send_str(REP_OK, id, buf);
      break;
    }
    case REQ_SINK:
      for (int i = 0; i < nfds; i++) add_sink(fds[i]);
      nfds = 0;
      break;
    default:
      send_errno(id, ENOSYS);
  }
  close_fds(fds, nfds);
  free(payload);
  return 0;
}

/* ---- options: parsed and checked first, acted on afterwards ------------- */

static void bad_option(const char *fmt, ...) {
  char msg[OPTION_PATH_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  dprintf(2, "sandboxlite-executor: %s\n", msg); /* one write */
  _exit(EXIT_BAD_OPTION);
}

/* A decimal number without sign, spaces or overflow; 0, or -1. */
static int parse_number(const char *s, unsigned long long *out) {
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || errno) return -1;
  *out = v;
  return 0;
}

/* Fill opts from argv[1..]: nothing is opened, closed, read or set here, so a
 * bad command line is refused before the executor does anything at all. */
static void parse_options(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *eq = strchr(a, '=');
    int id = 0;
    while (id < N_OPTS && (!eq || strncmp(a, opt_specs[id].key, (size_t)(eq - a)) || opt_specs[id].key[eq - a])) id++;
    if (id == N_OPTS) bad_option("unknown option '%s'", a);
    const struct opt_spec *spec = &opt_specs[id];
    const char *v = eq + 1;
    if (opts.n[id] == spec->max) {
      if (spec->max == 1) bad_option("option '%s': %s= given more than once", a, spec->key);
      bad_option("more than %d %s= options", spec->max, spec->key);
    }
    unsigned long long n = 0;
    switch (spec->kind) {
      case OPT_FD:
        if (parse_number(v, &n) < 0 || n > INT_MAX) bad_option("option '%s': expected a descriptor number", a);
        if (fcntl((int)n, F_GETFD) < 0) bad_option("option '%s': descriptor %llu is not open", a, n);
        *(id == O_CTRL ? &opts.ctrl : id == O_EXE ? &opts.exe : &opts.seccomp) = (int)n;
        break;
      case OPT_SIZE:
        if (parse_number(v, &n) < 0) bad_option("option '%s': expected a number of bytes", a);
        *(id == O_UPPER ? &opts.upper : id == O_TMP ? &opts.tmp : &opts.testbed) = n;
        break;
      case OPT_COUNT:
        if (parse_number(v, &n) < 0 || n == 0 || n >= 1ull << 31) bad_option("option '%s': expected a positive number", a);
        opts.ptys = (unsigned)n;
        break;
      case OPT_FLAG:
        if (strcmp(v, "0") && strcmp(v, "1")) bad_option("option '%s': expected 0 or 1", a);
        *(id == O_DEVDIR ? &opts.devdir : id == O_ROOTRO ? &opts.rootro : id == O_DEFER ? &opts.defer
          : id == O_LANDLOCK ? &opts.landlock : &opts.net) = v[0] == '1';
        break;
      case OPT_NAME:
        if (!layer_name_ok(v, strlen(v))) bad_option("option '%s': expected 1 to %d lowercase hex digits", a, LAYER_ID_MAX);
        memcpy(layers[n_layers++], v, strlen(v) + 1);
        break;
      case OPT_RLIMIT:
        if (strcmp(v, "inf") == 0)
          opts.rlimit[id] = RLIM_INFINITY;
        else if (parse_number(v, &n) == 0)
          opts.rlimit[id] = (rlim_t)n;
        else
          bad_option("option '%s': expected a number or inf", a);
        break;
      case OPT_PATH:
        /* room for the generation's prefix; a comma or colon would split the overlay's options */
        if (v[0] != '/' || strlen(v) > OPTION_PATH_MAX || ((id == O_LOWER || id == O_SNAPS) && strpbrk(v, ",:")) ||
            (id == O_SNAPS && strlen(v) > SNAPS_PATH_MAX))
          bad_option("option '%s': expected an absolute path", a);
        if (id == O_LOWER)
          opts.lower = v;
        else if (id == O_SNAPS)
          opts.snaps = v;
        else
          (id == O_BIND ? opts.binds : id == O_WTMPFS ? opts.wtmpfs : id == O_MKDIR ? opts.mkdirs : id == O_RO ? opts.ro
           : id == O_RW ? opts.rw : id == O_OWN ? opts.own : opts.devrw)[opts.n[id]] = v;
        break;
    }
    opts.n[id]++;
  }
  if (!opts.n[O_SECCOMP]) bad_option("no seccomp filter (seccomp=FD): refusing to run commands unfiltered");
  if (opts.landlock) { /* no mount namespace: the options that shape one make no sense */
    static const int ns_only[] = {O_LOWER, O_UPPER, O_BIND, O_WTMPFS, O_DEVDIR, O_ROOTRO, O_MKDIR, O_PTYS, O_SNAPS, O_LAYER,
                                  O_DEFER};
    for (size_t i = 0; i < sizeof ns_only / sizeof *ns_only; i++)
      if (opts.n[ns_only[i]]) bad_option("option %s= needs namespaces: not with landlock=1", opt_specs[ns_only[i]].key);
    if (!opts.n[O_OWN]) bad_option("landlock=1 needs at least one own= directory (where the sandbox writes)");
  } else {
    if (opts.n[O_LAYER] && !opts.snaps) bad_option("layer= needs snaps= (where the snapshot store is bound)");
    static const int ll_only[] = {O_RO, O_RW, O_OWN, O_DEVRW, O_NET};
    for (size_t i = 0; i < sizeof ll_only / sizeof *ll_only; i++)
      if (opts.n[ll_only[i]]) bad_option("option %s= is for landlock=1 only", opt_specs[ll_only[i]].key);
  }
}

/* The options that act on the executor itself (the rest shape generations). */
static void apply_options(void) {
  ctrl = opts.ctrl;
  if (opts.n[O_EXE]) close(opts.exe);
  if (load_filter(opts.seccomp) < 0) die("reading the seccomp filter");
  for (int id = 0; id < N_OPTS; id++) {
    if (opt_specs[id].kind != OPT_RLIMIT || !opts.n[id]) continue;
    struct rlimit rl = {opts.rlimit[id], opts.rlimit[id]};
    if (setrlimit(opt_rlimit[id], &rl) < 0) {
      dprintf(2, "sandboxlite-executor: setrlimit %s: %s\n", opt_specs[id].key, strerror(errno));
      _exit(EXIT_RLIMIT);
    }
  }
}

/* Launcher mode, for a root caller: "launch [-t TASKS]... UID GID PROGRAM
 * ARGS..." joins the cgroup v1 groups (see launcher_x86_64.c), drops to an
 * unprivileged uid/gid (no supplementary groups), then executes bwrap, so
 * that uid 0 inside the sandbox is never the host's root. */
static int launch(int argc, char **argv) {
  for (int trees = 0; argc >= 5 && strcmp(argv[2], "-m") == 0; trees++) { /* see launcher_x86_64.c */
    int fd = atoi(argv[3]);
    if (trees == 2 ||
        (trees == 0 && (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)) ||
        syscall(SYS_move_mount, fd, "", AT_FDCWD, argv[4], 0x00000004 /* MOVE_MOUNT_F_EMPTY_PATH */) < 0)
      die("attaching an idmapped mount tree");
    close(fd);
    argv += 3;
    argc -= 3;
  }
  while (argc >= 4 && strcmp(argv[2], "-t") == 0) {
    int fd = open(argv[3], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, "0", 1) != 1) die(argv[3]);
    close(fd);
    argv += 2;
    argc -= 2;
  }
  if (argc >= 4 && strcmp(argv[2], "-n") == 0) {
    int fd = atoi(argv[3]);
    if (setns(fd, CLONE_NEWNET) < 0) die("joining the network namespace");
    close(fd);
    argv += 2;
    argc -= 2;
  }
  if (argc < 5) {
    dprintf(2, "sandboxlite-executor: launch [-m TREE_FD DIR] [-t TASKS_FILE]... [-n NETNS_FD] UID GID PROGRAM ARGS...\n");
    return EXIT_FATAL;
  }
  uid_t uid = (uid_t)strtoul(argv[2], NULL, 10);
  gid_t gid = (gid_t)strtoul(argv[3], NULL, 10);
  if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) die("drop privileges");
  if (getuid() != uid || geteuid() != uid || setuid(0) == 0) {
    dprintf(2, "sandboxlite-executor: could not drop to uid %u\n", (unsigned)uid);
    return EXIT_FATAL;
  }
  execv(argv[4], argv + 4);
  die(argv[4]);
  return EXIT_FATAL;
}

/* Network namespace mode, for a root caller's pool of namespaces made ahead of
 * time (sandboxlite/netns.py): "netns" serves a unix socket on fd 0.  For each
 * byte it reads, it forks a child that unshares a user namespace (left without
 * a mapping: nothing ever runs in it) and a network namespace owned by it,
 * brings lo up and sends the namespace's descriptor back on the socket (one
 * byte: 'N', or 'E' and no descriptor when it failed, the reason on stderr).
 * It exits at end of file (the host closed its end, or died).  A network
 * namespace owned by the host's initial user namespace would receive the
 * host's device events (NETLINK_KOBJECT_UEVENT); one owned by any other does
 * not, and no sandbox holds a capability over it. */
static void send_netns(int sock) {
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) < 0) die("unshare(CLONE_NEWUSER|CLONE_NEWNET)");
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) die("socket");
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) die("SIOCGIFFLAGS lo");
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0) die("SIOCSIFFLAGS lo up");
  close(s);
  int fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("/proc/self/ns/net");
  char byte = 'N';
  struct iovec iov = {&byte, 1};
  char cbuf[CMSG_SPACE(sizeof(int))];
  memset(cbuf, 0, sizeof cbuf);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (sendmsg(sock, &msg, MSG_NOSIGNAL) != 1) die("sending the namespace");
}

static int serve_netns(void) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  char req;
  while (read(0, &req, 1) == 1) {
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
      send_netns(0);
      _exit(0);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      char e = 'E';
      if (send(0, &e, 1, MSG_NOSIGNAL) != 1) return 0;
    }
  }
  return 0;
}

/* User namespace mode, for idmapped images (sandboxlite/idmap.py): "userns"
 * unshares a user namespace, says 'u' on fd 1 and waits for end of file on
 * fd 0, while the caller (root) writes its maps and opens it. */
static int hold_userns(void) {
  if (unshare(CLONE_NEWUSER) < 0) die("unshare(CLONE_NEWUSER)");
  if (write(1, "u", 1) != 1) die("write");
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "launch") == 0) return launch(argc, argv);
  if (argc == 2 && strcmp(argv[1], "userns") == 0) return hold_userns();
  if (argc == 2 && strcmp(argv[1], "netns") == 0) return serve_netns();
  parse_options(argc, argv); /* first: a bad option is refused before anything is done */
  /* dispositions survive execve: whatever the host ignored (Python ignores
   * SIGPIPE) must not leak into the sandbox's commands */
  for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
  prctl(PR_SET_DUMPABLE, 0);
  /* with a PID namespace, bwrap is the parent.  Landlock mode's parent is the host's thread that
   * started it, which may end long before the sandbox: the end of the control socket says when
   * the host has gone */
  if (!opts.landlock) prctl(PR_SET_PDEATHSIG, SIGKILL);
  apply_options();
  if (opts.landlock) landlock_start();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) die("signalfd");
  fcntl(ctrl, F_SETFD, FD_CLOEXEC);
  cap_sinks = 16;
  pfds = calloc(cap_sinks, sizeof *pfds);
  if (!pfds) die("calloc");
  pfds[0].fd = ctrl;
  pfds[0].events = POLLIN;
  pfds[1].fd = sfd;
  pfds[1].events = POLLIN;
  pfds[2].fd = -1;
  pfds[2].events = POLLIN;
  root_fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  proc_fd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0 || proc_fd < 0) die("opening / and /proc");
  /* Landlock mode's mount table is the host's, seen by the sandbox anyway (and no chroot) */
  if (!opts.landlock && (chroot("/proc") < 0 || chdir("/") < 0)) die("moving into /proc");
  if (!opts.defer && new_generation() < 0) die("setting up the sandbox's filesystem");
  send_str(REP_HELLO, 0, HELLO_TEXT);
  /* the zygote confines itself while the host reads the hello.  Landlock mode: at the first request,
   * when the host has placed the executor in its cgroup (no PID namespace holds it back meanwhile) */
  if (!opts.landlock && !opts.defer) make_standby();
  for (;;) {
    int r = poll(pfds, SINK0 + n_sinks, -1);
    if (r < 0) {
      if (errno == EINTR) continue;
      die("poll");
    }
    if (pfds[1].revents) {
      struct signalfd_siginfo si;
      while (read(sfd, &si, sizeof si) == sizeof si) {
      }
      reap();
    }
    if (n_sinks) drain_sinks();
    if (pfds[2].revents & POLLIN) {
      ctrl = pfds[2].fd;
      int gone = handle_request(1) < 0;
      ctrl = opts.ctrl;
      if (gone) drop_connector();
    } else if (pfds[2].revents) {
      drop_connector();
    }
    if (pfds[0].revents & POLLIN) {
      if (handle_request(0) < 0) quit();
    } else if (pfds[0].revents & (POLLHUP | POLLERR)) {
      quit();
    }
  }
}
