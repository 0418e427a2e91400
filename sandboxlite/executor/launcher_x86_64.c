/*
 * sandboxlite launcher (x86_64, no libc):
 *     launcher [-m TREE_FD DIR]... [-t TASKS_FILE]... [-n NETNS_FD] UID GID PROGRAM ARGS...
 *
 * With -m (at most twice: the image, the snapshot store), first move into a
 * private mount namespace of its own and attach the detached mount tree open
 * on TREE_FD (idmapped to UID by the caller: sandboxlite/isolation/idmap.py) at DIR,
 * where bwrap binds it from.  Attached
 * by root before bwrap's user namespace exists, the mount is locked for the
 * jail: its read-only flag cannot be cleared from inside.
 * For a root caller: join the sandbox's cgroup v1 groups (writing "0" to each
 * group's `tasks` file moves this single thread; unlike a write of a pid to
 * cgroup.procs it skips the global threadgroup lock and its RCU grace period,
 * which costs 5-20 ms), drop to an unprivileged uid/gid with no supplementary
 * groups, check the drop cannot be undone, then execute PROGRAM (bwrap), whose
 * processes all inherit the groups.  With -n, first join the network
 * namespace open on NETNS_FD (made ahead of time by the caller, see
 * sandboxlite/network/netns.py) and close the descriptor; bwrap then keeps it.
 * The executor binary has the same mode ("launch"), but a static glibc
 * program pays ~0.3 ms of start-up on VMs where CPUID traps to the
 * hypervisor (glibc probes the CPU at every start); this one pays nothing.
 * Built with -nostdlib; other architectures use the executor's mode.
 */

#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_execve 59
#define SYS_exit 60
#define SYS_getuid 102
#define SYS_getgid 104
#define SYS_setuid 105
#define SYS_geteuid 107
#define SYS_setgroups 116
#define SYS_setresuid 117
#define SYS_setresgid 119
#define SYS_setns 308
#define SYS_mount 165
#define SYS_unshare 272
#define SYS_move_mount 429
#define CLONE_NEWNET 0x40000000
#define CLONE_NEWNS 0x00020000
#define MS_REC 16384
#define MS_PRIVATE (1 << 18)
#define AT_FDCWD (-100)
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004

static long sys3(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return r;
}

static long sys5(long n, long a, long b, long c, long d, long e) {
  long r;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8) : "rcx", "r11", "memory");
  return r;
}

static unsigned long slen(const char *s) {
  unsigned long n = 0;
  while (s[n]) n++;
  return n;
}

static void say(const char *a, const char *b) {
  sys3(SYS_write, 2, (long)"sandboxlite-launcher: ", 22);
  sys3(SYS_write, 2, (long)a, (long)slen(a));
  sys3(SYS_write, 2, (long)b, (long)slen(b));
  sys3(SYS_write, 2, (long)"\n", 1);
}

static long num(const char *s) {
  long v = 0;
  if (!*s) return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return -1;
    v = v * 10 + (*s - '0');
    if (v > 0x7fffffff) return -1;
  }
  return v;
}

__attribute__((noreturn)) static void quit(int code) {
  for (;;) sys3(SYS_exit, code, 0, 0);
}

__attribute__((noreturn, used)) void launcher_main(long *sp) {
  long argc = sp[0];
  char **argv = (char **)(sp + 1);
  char **envp = argv + argc + 1;
  for (int trees = 0; argc >= 4 && argv[1][0] == '-' && argv[1][1] == 'm' && !argv[1][2]; trees++) {
    long fd = num(argv[2]);
    if (fd < 0 || trees == 2 ||
        (trees == 0 && (sys3(SYS_unshare, CLONE_NEWNS, 0, 0) < 0 ||
                        sys5(SYS_mount, 0, (long)"/", 0, MS_REC | MS_PRIVATE, 0) < 0)) ||
        sys5(SYS_move_mount, fd, (long)"", AT_FDCWD, (long)argv[3], MOVE_MOUNT_F_EMPTY_PATH) < 0) {
      say("cannot attach an idmapped mount tree at ", argv[3]);
      quit(111);
    }
    sys3(SYS_close, fd, 0, 0);
    argv += 3;
    argc -= 3;
  }
  while (argc >= 3 && argv[1][0] == '-' && argv[1][1] == 't' && !argv[1][2]) {
    long fd = sys3(SYS_open, (long)argv[2], 01 | 02000000 /* O_WRONLY|O_CLOEXEC */, 0);
    if (fd < 0 || sys3(SYS_write, fd, (long)"0", 1) != 1) {
      say("cannot join the cgroup ", argv[2]);
      quit(111);
    }
    sys3(SYS_close, fd, 0, 0);
    argv += 2;
    argc -= 2;
  }
  if (argc >= 3 && argv[1][0] == '-' && argv[1][1] == 'n' && !argv[1][2]) {
    long fd = num(argv[2]);
    if (fd < 0 || sys3(SYS_setns, fd, CLONE_NEWNET, 0) < 0) {
      say("cannot join the network namespace on descriptor ", argv[2]);
      quit(111);
    }
    sys3(SYS_close, fd, 0, 0);
    argv += 2;
    argc -= 2;
  }
  if (argc < 4) {
    say("usage: ", "launcher [-m TREE_FD DIR]... [-t TASKS_FILE]... [-n NETNS_FD] UID GID PROGRAM ARGS...");
    quit(111);
  }
  long uid = num(argv[1]), gid = num(argv[2]);
  if (uid <= 0 || gid < 0) {
    say("refusing uid/gid ", argv[1]);
    quit(111);
  }
  if (sys3(SYS_setgroups, 0, 0, 0) < 0 || sys3(SYS_setresgid, gid, gid, gid) < 0 ||
      sys3(SYS_setresuid, uid, uid, uid) < 0) {
    say("could not drop privileges to uid ", argv[1]);
    quit(111);
  }
  if (sys3(SYS_getuid, 0, 0, 0) != uid || sys3(SYS_geteuid, 0, 0, 0) != uid || sys3(SYS_getgid, 0, 0, 0) != gid ||
      sys3(SYS_setuid, 0, 0, 0) == 0) {
    say("privileges were not dropped for uid ", argv[1]);
    quit(111);
  }
  sys3(SYS_execve, (long)argv[3], (long)(argv + 3), (long)envp);
  say("cannot execute ", argv[3]);
  quit(111);
}

__asm__(
    ".text\n"
    ".global _start\n"
    "_start:\n"
    "  xor %rbp, %rbp\n"
    "  mov %rsp, %rdi\n"
    "  and $-16, %rsp\n"
    "  call launcher_main\n"
    "  hlt\n");
