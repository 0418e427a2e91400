/*
 * sandboxlite executor: PID 1 of every jail.  One static program, built from the files of this
 * directory: _build() in sandboxlite/executor/__init__.py compiles every .c file here but
 * launcher_x86_64.c (a program of its own) together, with this header.
 *
 * Which file holds what.
 *   executor.h     this map, what the program is (below), the protocol block (mirrors
 *                  sandboxlite/executor/protocol.py) and what the files share: types,
 *                  constants, globals, functions
 *   main.c         the options (parsed and checked first, acted on afterwards), main, the
 *                  request loop and its dispatch (handle_request), the sinks, the connector
 *   wire.c         frames on the control socket (ctrl), with descriptors riding along
 *   util.c         small helpers: die, payload strings, numbers, layer names, directory streams
 *   spawn.c        commands: the supervisor S (killing a process tree), confinement (the
 *                  seccomp filter), the zygote Z and its standby supervisors, spawn and kill,
 *                  reaping, every process of a generation killed
 *   generations.c  the filesystem the commands see: a generation built (G), reset
 *   requests.c     the file API in the generation's root (open, mkdir, symlink, stat, list,
 *                  remove, rename), loopback sockets, the namespace's last pid
 *   sharing.c      fork without a copy: share ('W'), attach ('A'), unused shared layers detached
 *   snapshots.c    snapshots ('P'): every process paused, the writes copied
 *   landlock.c     Landlock mode (landlock=1): the domain, the process tree killed, own= emptied
 *   launch.c       a root caller's helper modes: "launch" (drop to a uid, execute bwrap) and
 *                  "userns" (hold a user namespace while its maps are written)
 *   netns.c        "netns": the maker of network namespaces
 *
 * Requests (enum request), their handlers (dispatched by handle_request, main.c) and files:
 *   'S' REQ_SPAWN      do_spawn      spawn.c
 *   'K' REQ_KILL       do_kill       spawn.c
 *   'O' REQ_OPEN       do_open       requests.c
 *   'M' REQ_MKDIR      do_mkdir      requests.c
 *   'Y' REQ_SYMLINK    do_symlink    requests.c
 *   'I' REQ_STAT       do_stat       requests.c
 *   'G' REQ_LIST       do_list       requests.c
 *   'V' REQ_REMOVE     do_remove     requests.c
 *   'N' REQ_RENAME     do_rename     requests.c
 *   'D' REQ_SINK       add_sink      main.c        (for each descriptor attached)
 *   'L' REQ_LAST_PID   do_last_pid   requests.c
 *   'Z' REQ_RESET      do_reset      generations.c
 *   'T' REQ_LOOPBACK   do_loopback   requests.c    (the only request served on the connector)
 *   'U' REQ_CONNECTOR  do_connector  main.c
 *   'P' REQ_SNAPSHOT   do_snapshot   snapshots.c
 *   'W' REQ_SHARE      do_share      sharing.c
 *   'A' REQ_ATTACH     do_attach     sharing.c
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
 *                no reply on success (with SP_PID: 'R' with the command's
 *                pid), then 'X'; 'E' if it cannot start
 *   'K' kill     "all" (the command's tree), "desc FLOOR" (what the command
 *                started after pid FLOOR, not the command: a shell's timeout)
 *                or "sig N" (signal N to the command's process group, while it
 *                runs); no reply
 *   'O' open     flags (O_* | OP_*), mode, path, resolved in the generation's
 *                root: 'F' with the descriptor (empty payload) or 'E'
 *   'M' mkdir    mode, path (mkdir -p): 'R' or 'E'
 *   'Y' symlink  target, path: 'R' or 'E'
 *   'I' stat     "0" (the link itself) or "1" (links followed in the root), path:
 *                a stream (below) of one record, or 'E'
 *   'G' list     MAX_ENTRIES, MAX_BYTES, path (a directory): a stream of a record
 *                per entry but "." and "..", or 'E' (E2BIG past MAX_ENTRIES
 *                records, EFBIG past MAX_BYTES of them; also after a part was sent)
 *                A stream: 'R' frames whose payloads, put end to end, are the
 *                records, then an empty 'R'.  A record: "T MODE SIZE SEC NSEC UID
 *                GID" (T one of f d l p s c b ?, MODE the permission bits, the
 *                times of the last modification, ids as the sandbox sees them),
 *                NUL, the name (empty for 'I'), NUL, a link's target (else
 *                empty), NUL.  A record may span frames
 *   'V' remove   "0" or "1" (recursive), path: the file, link (never what it
 *                points to) or empty directory; "1" empties a directory first,
 *                never following a link nor entering another mount: 'R' or 'E'
 *   'N' rename   source, destination (renameat, EXDEV across mounts): 'R' or 'E'
 *   'D' sink     no payload; the attached pipes are drained and discarded
 *   'L' last pid no payload: 'R' with the namespace's last pid
 *   'Z' reset    the layers (top first; none: the image): every process killed,
 *                a new generation over them; 'R' or 'E'
 *   'P' snapshot "MAX_BYTES" [" NAME"] and an empty directory: the generation's
 *                writes (or the shared layer NAME) copied there; see snapshots.c
 *   'W' share    "1 COUNT", "0 COUNT" or "NAME COUNT": COUNT 'F' frames, each a
 *                mask of places and their detached mounts; see sharing.c
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
 * "launch ..." as the first argument is the launcher mode instead (see launch,
 * launch.c), "netns" the maker of network namespaces (see serve_netns, netns.c),
 * "userns" the holder of a user namespace while its maps are written (see
 * hold_userns, launch.c).
 *
 * The protocol block below is checked against sandboxlite/executor/protocol.py
 * (the one source of truth) by tests/test_protocol.py: change both together.
 */
#ifndef SANDBOXLITE_EXECUTOR_H
#define SANDBOXLITE_EXECUTOR_H

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

/* ---- the protocol (mirrors sandboxlite/executor/protocol.py; one definition per line) ---- */

#define HELLO_TEXT "sandboxlite-executor 7"
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
  REQ_STAT = 'I',
  REQ_LIST = 'G',
  REQ_REMOVE = 'V',
  REQ_RENAME = 'N',
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
#define SP_TTY 16u   /* its stdin is a terminal: made the command's controlling terminal (TIOCSCTTY) */
#define SP_PID 32u   /* S reports the command's pid ('R' "PID") before anything else */

/* open flags of our own, above the kernel's O_* bits we forward */
#define OP_MKPARENTS 0x40000000u
#define OP_REQ_REG 0x20000000u
#define OP_REQ_DIR 0x10000000u
#define OP_KERNEL_MASK 0x0fffffffu

/* kill requests */
#define KILL_ALL "all"
#define KILL_DESC "desc"
#define KILL_SIG "sig"

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

/* ---- kernel interfaces older headers may lack ------------------------------ */

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
#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif

/* ---- shared between the files ----------------------------------------------
 * Every file keeps its own helpers static; what another file uses is declared here, under the
 * file that defines it. */

/* main.c: the options, parsed (parse_options) before any of them is acted on */
struct options {
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
};
extern struct options opts;
void drop_sinks(void);

/* wire.c: frames on the control socket */
extern int ctrl;
int read_all(int fd, void *buf, size_t len);
int send_with_fds(int sock, const void *hdr, size_t hlen, const void *payload, size_t plen, const int *fds,
                  int nfds);
ssize_t recv_fds(int sock, void *buf, size_t size, int *fds, int *nfds);
int recv_with_fds(int sock, void *hdr, size_t hlen, int *fds, int *nfds);
void send_frame_fds(char type, uint32_t id, const void *payload, uint32_t plen, const int *fds, int nfds);
void send_frame(char type, uint32_t id, const void *payload, uint32_t plen, int fd);
void send_str(char type, uint32_t id, const char *s);
void send_errno(uint32_t id, int err);

/* util.c */
void die(const char *what);
int split(char *p, size_t len, char **out, int max);
void close_fds(int *fds, int n);
int parse_number(const char *s, unsigned long long *out);
int layer_name_ok(const char *v, size_t len);
DIR *dir_at(int dfd, const char *path);

/* generations.c: the generation the commands live in (see the comments there) */
enum { PL_TESTBED, PL_TMP, PL_HOME, N_PLACE_WS }; /* places whose writes may be an overlay's (gen_pws) */
enum { SH_ROOT, SH_TESTBED, SH_TMP, SH_HOME, N_SHARE }; /* the places a share sends (share_places) */
enum { TPL_NONE, TPL_UPPER, TPL_PLAIN };                /* what a place's template is (gen_tpl_kind) */
#define FORK_DIR "/.sl/fork" /* shared layers attached ('A'): FORK_DIR/NAME/PLACE, in PID 1's mount namespace */
extern char layers[MAX_LAYERS][LAYER_ID_MAX + 1];
extern int n_layers;
extern int gen_mnt, gen_root, gen_ipc, gen_ws, gen_pws[N_PLACE_WS];
extern const char *const share_places[N_SHARE], *const share_dirs[N_SHARE];
extern int gen_tpl[N_SHARE], gen_tpl_kind[N_SHARE];
extern dev_t gen_plain_dev[N_SHARE];
extern int root_fd, proc_fd;
extern int gen_ok;
int new_generation(void);
void do_reset(uint32_t id, const char *payload, size_t plen);

/* spawn.c: commands and the processes that serve them */
int load_filter(int fd);
void make_standby(void);
void reap(void);
void kill_generation(void);
void do_spawn(uint32_t id, char *payload, size_t plen, int *fds, int nfds);
void do_kill(uint32_t id, const char *how);

/* requests.c: the file API, loopback sockets, the last pid */
int open_in(const char *path, int flags, mode_t mode);
void do_open(uint32_t id, char *payload, size_t plen);
void do_mkdir(uint32_t id, char *payload, size_t plen);
void do_symlink(uint32_t id, char *payload, size_t plen);
void do_stat(uint32_t id, char *payload, size_t plen);
void do_list(uint32_t id, char *payload, size_t plen);
void do_remove(uint32_t id, char *payload, size_t plen);
void do_rename(uint32_t id, char *payload, size_t plen);
void do_loopback(uint32_t id, char *payload, size_t plen);
void do_last_pid(uint32_t id);

/* sharing.c: fork without a copy */
int is_attached(const char *name);
void attached_dir(const char *name, char *base, size_t size);
void detach_unused(void);
void do_share(uint32_t id, const char *payload);
void do_attach(uint32_t id, const char *payload, size_t plen, int *fds, int nfds);

/* snapshots.c */
void do_snapshot(uint32_t id, const char *payload, int *fds, int nfds);

/* landlock.c: Landlock mode */
extern int ll_ruleset;
void landlock_start(void);
void kill_tree(void);
int ll_generation(void);

/* launch.c and netns.c: the modes other than PID 1 */
int launch(int argc, char **argv);
int hold_userns(void);
int serve_netns(void);

#endif
