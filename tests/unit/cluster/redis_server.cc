#include "redis_server.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <vector>

namespace hz::cluster::test {

RedisServer::RedisServer() {
  char tmpl[] = "/tmp/hz-redis-XXXXXX";
  if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
  socket_ = dir_ + "/redis.sock";
}

RedisServer::~RedisServer() {
  Kill();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

bool RedisServer::Start() {
  if (dir_.empty()) {
    error_ = "cannot create a temporary directory";
    return false;
  }
  ::unlink(socket_.c_str());
  std::vector<std::string> args = {
      "redis-server", "--port", "0",     "--unixsocket", socket_,     "--save",           "",
      "--appendonly", "no",     "--dir", dir_,           "--logfile", dir_ + "/redis.log"};
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp("redis-server", argv.data());
    _exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ =
          "redis-server exited at once (is Debian's redis-server installed? "
          "scripts/install-deps.sh installs it)";
      return false;
    }
    if (Cli("PING").find("PONG") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  error_ = "redis-server did not answer within 5 s";
  return false;
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string RedisServer::Cli(const std::string& args) const {
  const std::string cmd = "redis-cli -s " + socket_ + " " + args + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    std::array<char, 256> buf;
    while (fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
    pclose(p);
  }
  return out;
}

}  // namespace hz::cluster::test
