/* sandboxlite executor: "netns", the maker of network namespaces (main() picks the mode). */
#include "executor.h"

/* Network namespace mode, for a root caller's pool of namespaces made ahead of
 * time (sandboxlite/network/netns.py): "netns" serves a unix socket on fd 0.  For each
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

int serve_netns(void) {
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
