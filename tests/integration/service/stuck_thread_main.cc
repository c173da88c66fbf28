// harmonaized whose connection thread 0 never returns, as a handler stuck in
// a system call would not: what SIGTERM does with a stuck thread (the
// shutdown tests).
#include <unistd.h>

#include "daemon_main.h"

int main(int argc, char** argv) {
  return hz::service::RunDaemon(argc, argv, [](hz::service::Service& service) {
    service.PostToConnectionThread(0, [] {
      for (;;) pause();
    });
  });
}
