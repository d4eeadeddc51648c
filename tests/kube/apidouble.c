/* The scripted API-server test double (see apidouble.h). */
#include "apidouble.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX (1 << 20)
#define IO_WAIT_MS 3000

struct td_server {
  const td_expect *script;
  size_t n;
  size_t next;
  int lfd;
  char url[64];
  pthread_t thr;
  atomic_int stop;
  atomic_size_t served;
  char err[1024];
};

__attribute__((format(printf, 2, 3))) static void fail(td_server *s,
                                                       const char *fmt, ...) {
  if (s->err[0])
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof(s->err), fmt, ap);
  va_end(ap);
}

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Case-insensitive strstr (strcasestr is not POSIX). */
static const char *find_ci(const char *h, const char *n) {
  size_t nl = strlen(n);
  for (; *h; h++)
    if (!strncasecmp(h, n, nl))
      return h;
  return NULL;
}

static void pause_ms(long ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Reads one request into buf: returns its length or -1.  *hdr_end is the
 * offset of the body. */
static long read_request(int fd, char *buf, size_t cap, size_t *hdr_end) {
  size_t len = 0;
  char *end = NULL;
  size_t need = 0;
  for (;;) {
    if (end && len >= need)
      return (long)len;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, IO_WAIT_MS) <= 0 || len + 1 >= cap)
      return -1;
    ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
    if (r <= 0)
      return -1;
    len += (size_t)r;
    buf[len] = '\0';
    if (!end && (end = strstr(buf, "\r\n\r\n")) != NULL) {
      *hdr_end = (size_t)(end - buf) + 4;
      need = *hdr_end;
      const char *cl = find_ci(buf, "\r\nContent-Length:");
      if (cl && cl < end) {
        long v = strtol(cl + 17, NULL, 10);
        if (v < 0 || (size_t)v > cap - 1 - need)
          return -1;
        need += (size_t)v;
      }
    }
  }
}

/* The value of header `name` (case-insensitive) copied into out. */
static void header(const char *req, size_t hdr_end, const char *name, char *out,
                   size_t cap) {
  out[0] = '\0';
  char pat[64];
  snprintf(pat, sizeof(pat), "\r\n%s:", name);
  const char *h = find_ci(req, pat);
  if (!h || (size_t)(h - req) >= hdr_end)
    return;
  h += strlen(pat);
  while (*h == ' ')
    h++;
  const char *e = strstr(h, "\r\n");
  size_t n = e ? (size_t)(e - h) : strlen(h);
  if (n >= cap)
    n = cap - 1;
  memcpy(out, h, n);
  out[n] = '\0';
}

static const char *reason(int st) {
  switch (st) {
  case 200:
    return "OK";
  case 201:
    return "Created";
  case 404:
    return "Not Found";
  case 409:
    return "Conflict";
  case 410:
    return "Gone";
  case 500:
    return "Internal Server Error";
  default:
    return "Status";
  }
}

static void respond(td_server *s, int fd, const td_expect *e, int status) {
  char head[256];
  if (!e || !e->chunks[0]) {
    const char *body = e && e->body ? e->body : "";
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     status, reason(status), strlen(body));
    if (send_all(fd, head, (size_t)n) == 0)
      send_all(fd, body, strlen(body));
    return;
  }
  int n = snprintf(head, sizeof(head),
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                   status, reason(status));
  if (send_all(fd, head, (size_t)n))
    return;
  for (int i = 0; i < TD_MAX_CHUNKS && e->chunks[i]; i++) {
    size_t len = strlen(e->chunks[i]);
    n = snprintf(head, sizeof(head), "%zx\r\n", len);
    if (send_all(fd, head, (size_t)n) || send_all(fd, e->chunks[i], len) ||
        send_all(fd, "\r\n", 2))
      return;
    pause_ms(5);
  }
  if (e->cut)
    return;
  if (e->hold) {
    char b[64];
    for (;;) { /* until the client hangs up (or the double stops) */
      if (atomic_load(&s->stop))
        return;
      struct pollfd p = {fd, POLLIN, 0};
      int r = poll(&p, 1, 50);
      if (r > 0 && recv(fd, b, sizeof(b), 0) <= 0)
        return;
      if (r < 0)
        return;
    }
  }
  send_all(fd, "0\r\n\r\n", 5);
}

static void serve(td_server *s, int fd) {
  char *buf = malloc(REQ_MAX);
  size_t hdr_end = 0;
  if (!buf)
    return;
  long len = read_request(fd, buf, REQ_MAX, &hdr_end);
  if (len < 0) {
    free(buf);
    return; /* a connection that sent nothing (curl probing): ignore */
  }
  char method[16] = "", target[4096] = "";
  const char *sp = strchr(buf, ' ');
  const char *sp2 = sp ? strchr(sp + 1, ' ') : NULL;
  if (sp && sp2 && (size_t)(sp - buf) < sizeof(method) &&
      (size_t)(sp2 - sp - 1) < sizeof(target)) {
    memcpy(method, buf, (size_t)(sp - buf));
    memcpy(target, sp + 1, (size_t)(sp2 - sp - 1));
  }
  const td_expect *e = s->next < s->n ? &s->script[s->next] : NULL;
  int ok = e != NULL;
  if (!e) {
    fail(s, "unexpected request after the script ended: %s %s", method, target);
  } else if (strcmp(method, e->method) || strcmp(target, e->target)) {
    fail(s, "expected %s %s, got %s %s", e->method, e->target, method, target);
    ok = 0;
  } else {
    const char *body = buf + hdr_end;
    for (int i = 0; i < TD_MAX_HAS && e->body_has[i]; i++)
      if (!strstr(body, e->body_has[i])) {
        fail(s, "request body lacks '%s': %s", e->body_has[i], body);
        ok = 0;
      }
    char v[512];
    if (e->ctype) {
      header(buf, hdr_end, "Content-Type", v, sizeof(v));
      if (strcmp(v, e->ctype)) {
        fail(s, "Content-Type '%s', want '%s'", v, e->ctype);
        ok = 0;
      }
    }
    if (e->token) {
      header(buf, hdr_end, "Authorization", v, sizeof(v));
      if (strncmp(v, "Bearer ", 7) || strcmp(v + 7, e->token)) {
        fail(s, "Authorization '%s', want 'Bearer %s'", v, e->token);
        ok = 0;
      }
    }
  }
  if (e)
    s->next++;
  atomic_fetch_add(&s->served, 1);
  if (ok)
    respond(s, fd, e, e->status);
  else
    respond(s, fd, NULL, 500);
  free(buf);
}

static void *loop(void *arg) {
  td_server *s = arg;
  while (!atomic_load(&s->stop)) {
    struct pollfd p = {s->lfd, POLLIN, 0};
    if (poll(&p, 1, 20) <= 0)
      continue;
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0)
      continue;
    serve(s, fd);
    close(fd);
  }
  return NULL;
}

td_server *td_start(const td_expect *script, size_t n) {
  td_server *s = calloc(1, sizeof(*s));
  if (!s)
    return NULL;
  s->script = script;
  s->n = n;
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t al = sizeof(a);
  if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) ||
      listen(s->lfd, 16) || getsockname(s->lfd, (struct sockaddr *)&a, &al)) {
    if (s->lfd >= 0)
      close(s->lfd);
    free(s);
    return NULL;
  }
  snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%u",
           (unsigned)ntohs(a.sin_port));
  atomic_init(&s->stop, 0);
  atomic_init(&s->served, 0);
  if (pthread_create(&s->thr, NULL, loop, s)) {
    close(s->lfd);
    free(s);
    return NULL;
  }
  return s;
}

const char *td_url(const td_server *s) { return s->url; }
size_t td_served(td_server *s) { return atomic_load(&s->served); }

int td_finish(td_server *s, char *err, size_t cap) {
  atomic_store(&s->stop, 1);
  pthread_join(s->thr, NULL);
  close(s->lfd);
  int rc = 0;
  if (s->err[0]) {
    snprintf(err, cap, "%s", s->err);
    rc = -1;
  } else if (s->next != s->n) {
    snprintf(err, cap, "only %zu of %zu expected requests came; next: %s %s",
             s->next, s->n, s->script[s->next].method,
             s->script[s->next].target);
    rc = -1;
  }
  free(s);
  return rc;
}
