/* sandboxlite executor: the modes a root caller uses before any jail exists ("launch", "userns";
 * "netns" is netns.c).  main() picks the mode from argv[1]. */
#include "executor.h"

/* Launcher mode, for a root caller: "launch [-t TASKS]... UID GID PROGRAM
 * ARGS..." joins the cgroup v1 groups (see launcher_x86_64.c), drops to an
 * unprivileged uid/gid (no supplementary groups), then executes bwrap, so
 * that uid 0 inside the sandbox is never the host's root. */
int launch(int argc, char **argv) {
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

/* User namespace mode, for idmapped images (sandboxlite/isolation/idmap.py): "userns"
 * unshares a user namespace, says 'u' on fd 1 and waits for end of file on
 * fd 0, while the caller (root) writes its maps and opens it. */
int hold_userns(void) {
  if (unshare(CLONE_NEWUSER) < 0) die("unshare(CLONE_NEWUSER)");
  if (write(1, "u", 1) != 1) die("write");
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
