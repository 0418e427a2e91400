/* sandboxlite executor: small helpers the other files share. */
#include "executor.h"

/* A system call the executor cannot do without failed: say which, and exit EXIT_FATAL. */
void die(const char *what) {
  dprintf(2, "sandboxlite-executor: %s: %s\n", what, strerror(errno));
  _exit(EXIT_FATAL);
}

/* Split a payload of NUL-terminated strings; returns count or -1. */
int split(char *p, size_t len, char **out, int max) {
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

void close_fds(int *fds, int n) {
  for (int i = 0; i < n; i++)
    if (fds[i] >= 0) close(fds[i]);
}

/* A decimal number without sign, spaces or overflow; 0, or -1. */
int parse_number(const char *s, unsigned long long *out) {
  if (*s < '0' || *s > '9') return -1;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || errno) return -1;
  *out = v;
  return 0;
}

/* A layer's name: 1 to LAYER_ID_MAX lowercase hex digits. */
int layer_name_ok(const char *v, size_t len) {
  if (len == 0 || len > LAYER_ID_MAX) return 0;
  for (size_t i = 0; i < len; i++)
    if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f'))) return 0;
  return 1;
}

/* A directory stream of `path` under `dfd` ("." for dfd itself); NULL with errno set. */
DIR *dir_at(int dfd, const char *path) {
  int fd = openat(dfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
  if (!d && fd >= 0) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return d;
}
