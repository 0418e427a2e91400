/* sandboxlite executor: main.  The options (parsed and checked first, acted on afterwards), the
 * request loop on the control socket and the connector, the dispatch of each request to its
 * handler (the table is in executor.h), the sinks. */
#include "executor.h"

/* ---- the request loop: the poll set, the sinks, the connector, dispatch ---- */

static struct pollfd *pfds;
static size_t n_sinks, cap_sinks; /* pfds[0] = ctrl, pfds[1] = signalfd, pfds[2] = the connector */
#define SINK0 3                     /* pfds[SINK0 ...]: the sinks */

/* The host has gone (or closed the sandbox): nothing of the sandbox may outlive it. */
static void quit(void) {
  if (opts.landlock) {
    kill_tree();
    ll_generation(); /* nothing is left for the host to remove but the directories */
  }
  _exit(0);
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

/* Every sink closed (a reset: what the old generation's commands held). */
void drop_sinks(void) {
  for (size_t i = 0; i < n_sinks; i++) close(pfds[SINK0 + i].fd);
  n_sinks = 0;
}

static void drop_connector(void) {
  if (pfds[2].fd >= 0) close(pfds[2].fd);
  pfds[2].fd = -1; /* poll(2) skips it */
  pfds[2].revents = 0;
}

/* 'U': the one descriptor attached becomes the connector (the old one dropped).  1 when it took
 * the descriptor, 0 when the request was refused (the caller closes what came). */
static int do_connector(uint32_t id, const int *fds, int nfds) {
  if (nfds != 1) {
    send_errno(id, EINVAL);
    return 0;
  }
  drop_connector();
  pfds[2].fd = fds[0];
  send_str(REP_OK, id, "");
  return 1;
}

/* One request frame from ctrl: its type, id, payload (NUL-terminated, *plen bytes before the NUL;
 * the caller frees it) and the descriptors that came with it.  0, or -1 when the host has gone. */
static int read_request(char *type, uint32_t *id, char **payload, size_t *plen, int *fds, int *nfds) {
  char hdr[9];
  if (recv_with_fds(ctrl, hdr, sizeof hdr, fds, nfds) < 0) return -1;
  uint32_t len;
  memcpy(&len, hdr, 4);
  memcpy(id, hdr + 5, 4);
  *type = hdr[4];
  if (len < 5 || len - 5 > MAX_REQUEST_PAYLOAD) return -1;
  *plen = len - 5;
  *payload = malloc(*plen + 1);
  if (!*payload) return -1;
  if (*plen && read_all(ctrl, *payload, *plen) < 0) {
    free(*payload);
    return -1;
  }
  (*payload)[*plen] = 0;
  return 0;
}

/* Read one request from ctrl; returns 0 on success, -1 when the host has gone.  ``narrow``: ctrl is
 * the connector, where only 'T' is served. */
static int handle_request(int narrow) {
  char type, *payload;
  uint32_t id;
  size_t plen;
  int fds[MAX_FDS], nfds = 0;
  if (read_request(&type, &id, &payload, &plen, fds, &nfds) < 0) return -1;
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
    case REQ_STAT:
      do_stat(id, payload, plen);
      break;
    case REQ_LIST:
      do_list(id, payload, plen);
      break;
    case REQ_REMOVE:
      do_remove(id, payload, plen);
      break;
    case REQ_RENAME:
      do_rename(id, payload, plen);
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
      if (do_connector(id, fds, nfds)) nfds = 0;
      break;
    case REQ_LAST_PID:
      do_last_pid(id);
      break;
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

static const int opt_rlimit[N_OPTS] = {[O_CPU] = RLIMIT_CPU, [O_AS] = RLIMIT_AS, [O_FSIZE] = RLIMIT_FSIZE,
                                       [O_NPROC] = RLIMIT_NPROC, [O_NOFILE] = RLIMIT_NOFILE,
                                       [O_CORE] = RLIMIT_CORE, [O_STACK] = RLIMIT_STACK};

/* The options, parsed (parse_options) before any of them is acted on. */
struct options opts = {.ctrl = CTRL_FD, .exe = -1, .seccomp = -1, .upper = 1ull << 30, .tmp = 1ull << 30,
                       .testbed = 2ull << 30, .ptys = 64};

static void bad_option(const char *fmt, ...) {
  char msg[OPTION_PATH_MAX + 256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  dprintf(2, "sandboxlite-executor: %s\n", msg); /* one write */
  _exit(EXIT_BAD_OPTION);
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

/* ---- main ---------------------------------------------------------------- */

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
