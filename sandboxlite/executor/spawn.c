/* sandboxlite executor: the commands.  A supervisor S per command (it kills the command's tree
 * on request), the confinement every S takes on, the zygote Z and the standby supervisors it
 * clones, the spawn and kill requests, reaping, and every process of a generation killed (reset,
 * share).  See "The processes" in executor.h. */
#include "executor.h"

extern char **environ;

/* The supervisors running, by the id of their spawn request (reap reports those that could not). */
struct child {
  uint32_t id;
  pid_t pid;
};
static struct child *children;
static size_t n_children, cap_children;

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
  sigaddset(&set, SIGUSR2);
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
    if (sig == SIGUSR2) { /* KILL_SIG: the signal in the value, to the command's process group */
      int fwd = si.si_value.sival_int;
      if (!cmd_done && fwd > 0 && fwd < NSIG && kill(-cmd, fwd) < 0) kill(cmd, fwd);
    } else if (sig == SIGTERM) {
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

/* ---- confinement: what every supervisor takes on before its command ------ */

/* The seccomp filter (seccomp=FD, read once at start: load_filter) every supervisor loads. */
static struct sock_fprog filter;

int load_filter(int fd) {
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

/* In a supervisor, before it forks the command: join the generation and
 * give up every privilege; the command inherits all of it.  Any failure ends
 * the process: nothing ever runs unconfined. */
static void confine_self(void) {
  int ok;
  if (opts.landlock) /* a layer of the executor's rules of its own (D2: see landlock.c) */
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

/* ---- a supervisor's start: the command ---------------------------------- */

/* C, the command (in S's vfork child: system calls only, no allocation): its descriptors 0-2
 * (want[0..2], else /dev/null) and 3 (status_src), its directory and environment, then execve. */
static void exec_command(const int *want, int status_src, int tty, const char *cwd, char **argv, char **env) {
  setsid();
  if (opts.landlock) prctl(PR_SET_PDEATHSIG, SIGKILL);
  int devnull = (want[0] < 0 || want[1] < 0 || want[2] < 0) ? open("/dev/null", O_RDWR | O_CLOEXEC) : -1;
  for (int i = 0; i < 3; i++) {
    int src = want[i] >= 0 ? want[i] : devnull;
    if (src < 0 || (src == i ? fcntl(i, F_SETFD, 0) : dup2(src, i)) < 0) _exit(126);
  }
  if (status_src >= 0 && dup2(status_src, 3) < 0) _exit(126);
  if (tty && ioctl(0, TIOCSCTTY, 0) < 0) _exit(126); /* a session leader without one: stdin becomes it */
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
  execvp(argv[0], argv);
  int err = errno;
  dprintf(2, "sandboxlite: %s: %s\n", argv[0], err == ENOENT ? "command not found" : strerror(err));
  _exit(err == ENOENT ? 127 : 126);
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
  /* fd 3's source out of the way of the dup2s onto 0..3 (exec_command) */
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
  sigaddset(&set, SIGUSR2);
  sigprocmask(SIG_BLOCK, &set, NULL);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  /* vfork: the child only makes system calls before execve (no allocation) */
  pid_t c = vfork();
  if (c < 0) {
    dprintf(want[2] >= 0 ? want[2] : 2, "sandboxlite: fork: %s\n", strerror(errno));
    report_exit(126 << 8);
  }
  if (c == 0) exec_command(want, status_src, (flags & SP_TTY) != 0, cwd, argv_copy, env); /* C: the command */
  if (flags & SP_PID) { /* before the exit report: S sends both, in this order */
    char pidbuf[24];
    snprintf(pidbuf, sizeof pidbuf, "%d", (int)c);
    send_str(REP_OK, id, pidbuf);
  }
  /* S keeps only the control socket */
  if (ctrl > 0) syscall(SYS_close_range, 0, (unsigned)ctrl - 1, 0);
  syscall(SYS_close_range, (unsigned)ctrl + 1, ~0U, 0);
  supervise(c);
}

/* ---- the zygote and its standby supervisors ----------------------------- */

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
void make_standby(void) {
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

/* ---- requests, reaping, a generation's processes killed ------------------ */

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

void do_spawn(uint32_t id, char *payload, size_t plen, int *fds, int nfds) {
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
 * command.  KILL_SIG " N": signal N to the command's process group (its supervisor forwards it;
 * nothing once the command has ended).  Anything else kills it all, as the safe reading. */
void do_kill(uint32_t id, const char *how) {
  for (size_t i = 0; i < n_children; i++)
    if (children[i].id == id) {
      if (strncmp(how, KILL_DESC " ", sizeof KILL_DESC) == 0) {
        union sigval v;
        v.sival_int = atoi(how + sizeof KILL_DESC);
        sigqueue(children[i].pid, SIGUSR1, v);
      } else if (strncmp(how, KILL_SIG " ", sizeof KILL_SIG) == 0) {
        union sigval v;
        v.sival_int = atoi(how + sizeof KILL_SIG);
        if (v.sival_int > 0 && v.sival_int < NSIG) sigqueue(children[i].pid, SIGUSR2, v);
      } else {
        kill(children[i].pid, SIGTERM);
      }
      kill(children[i].pid, SIGCONT); /* a supervisor stopped from inside could not act on it */
      return;
    }
}

void reap(void) {
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

/* Every process of the sandbox killed and reaped (PID 1 spared), and what served them dropped. */
void kill_generation(void) {
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
  drop_sinks();
}
