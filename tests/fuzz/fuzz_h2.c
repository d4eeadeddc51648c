/* The fuzz targets' raw HTTP/2 client (fuzz_h2.h). */
#include "fuzz_h2.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void fh_raw(const char *sock, const uint8_t *data, size_t size) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, sock, strlen(sock) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    abort();
  static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  (void)send(fd, preface, sizeof preface - 1, MSG_NOSIGNAL);
  (void)send(fd, data, size, MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  uint8_t buf[4096];
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  while (poll(&pf, 1, 2000) > 0 && recv(fd, buf, sizeof buf, 0) > 0)
    ;
  close(fd);
}
