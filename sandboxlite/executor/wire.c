/* sandboxlite executor: frames on the control socket (the wire format: see executor.h). */
#include "executor.h"

/* The socket frames are read from and sent on: opts.ctrl once the options are read (main points it
 * at the connector while it serves a request from there). */
int ctrl = CTRL_FD;

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

int read_all(int fd, void *buf, size_t len) {
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
int send_with_fds(int sock, const void *hdr, size_t hlen, const void *payload, size_t plen, const int *fds,
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
ssize_t recv_fds(int sock, void *buf, size_t size, int *fds, int *nfds) {
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
int recv_with_fds(int sock, void *hdr, size_t hlen, int *fds, int *nfds) {
  ssize_t n = recv_fds(sock, hdr, hlen, fds, nfds);
  if (n <= 0) return -1;
  if ((size_t)n < hlen && read_all(sock, (char *)hdr + n, hlen - (size_t)n) < 0) return -1;
  return 0;
}

/* Send one frame, optionally with one descriptor attached. */
void send_frame_fds(char type, uint32_t id, const void *payload, uint32_t plen, const int *fds, int nfds) {
  char hdr[9];
  if (plen > MAX_REPLY_PAYLOAD) _exit(EXIT_FATAL); /* the host would drop the jail anyway */
  uint32_t len = 5 + plen;
  memcpy(hdr, &len, 4);
  hdr[4] = type;
  memcpy(hdr + 5, &id, 4);
  /* the host gone; a connector that has gone is only dropped (its hang-up is polled) */
  if (send_with_fds(ctrl, hdr, 9, payload, plen, fds, nfds) < 0 && ctrl == opts.ctrl) _exit(0);
}

void send_frame(char type, uint32_t id, const void *payload, uint32_t plen, int fd) {
  send_frame_fds(type, id, payload, plen, &fd, fd >= 0 ? 1 : 0);
}

void send_str(char type, uint32_t id, const char *s) {
  send_frame(type, id, s, (uint32_t)strlen(s), -1);
}

void send_errno(uint32_t id, int err) {
  char buf[32];
  snprintf(buf, sizeof buf, "%d", err);
  send_str(REP_ERROR, id, buf);
}
