#!/usr/bin/python3
"""A service manager for the VM tests: runs a service as systemd runs a
Type=notify unit with a file-descriptor store (sd_notify(3),
sd_listen_fds(3)), so that the service's crash recovery can be exercised
without systemd.

  service_manager.py NOTIFY_SOCKET_PATH COMMAND...

The service gets NOTIFY_SOCKET. A datagram saying FDSTORE=1 keeps the
descriptors it carries under FDNAME= ("stored" when absent); FDSTOREREMOVE=1
closes those stored under FDNAME=. On SIGUSR1 the manager kills the service
with SIGKILL and starts it again with the store, as systemd restarts a
crashed service: the descriptors at 3, 4, ..., LISTEN_FDS, LISTEN_PID and
LISTEN_FDNAMES, and prints "service-manager: restarted PID". On SIGTERM it
stops the service and exits. With HZ_MANAGER_TRACE=1 in its environment it
prints every datagram it gets.
"""
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading

MAX_FDS = 253  # SCM_MAX_FD


class Manager:
    def __init__(self, path, command):
        self.command = command
        self.path = path
        self.store = []  # (name, fd), in the order stored
        self.lock = threading.Lock()
        if os.path.exists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.child = None
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        while True:
            msg, fds, _, _ = socket.recv_fds(self.sock, 4096, MAX_FDS)
            for fd in fds:
                os.set_inheritable(fd, False)
            self.apply(msg.decode(errors="replace").split("\n"), fds)

    def apply(self, lines, fds):
        name = "stored"
        for line in lines:
            if line.startswith("FDNAME="):
                name = line[len("FDNAME="):]
        if os.environ.get("HZ_MANAGER_TRACE"):
            print("service-manager: %s %d fds" % (lines, len(fds)), flush=True)
        with self.lock:
            if "FDSTOREREMOVE=1" in lines:
                for entry in [e for e in self.store if e[0] == name]:
                    os.close(entry[1])
                    self.store.remove(entry)
            for fd in fds:
                if "FDSTORE=1" in lines:
                    self.store.append((name, fd))
                else:
                    os.close(fd)

    def start(self):
        with self.lock:
            entries = list(self.store)

        def in_child():
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 1000) for _, fd in entries]
            for i, fd in enumerate(high):
                os.dup2(fd, 3 + i)
                os.close(fd)
            os.environ["NOTIFY_SOCKET"] = self.path
            if entries:
                os.environ["LISTEN_FDS"] = str(len(entries))
                os.environ["LISTEN_PID"] = str(os.getpid())
                os.environ["LISTEN_FDNAMES"] = ":".join(n for n, _ in entries)

        self.child = subprocess.Popen(self.command, preexec_fn=in_child, close_fds=False)
        return self.child.pid

    def crash(self):
        self.child.send_signal(signal.SIGKILL)
        self.child.wait()
        # What the dead process sent is read before the store is handed on.
        threading.Event().wait(0.2)
        print("service-manager: restarted %d" % self.start(), flush=True)

    def stop(self):
        if self.child and self.child.poll() is None:
            self.child.terminate()
            try:
                self.child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.child.kill()
        sys.exit(0)


def main():
    manager = Manager(sys.argv[1], sys.argv[2:])
    signal.signal(signal.SIGUSR1, lambda *_: manager.crash())
    signal.signal(signal.SIGTERM, lambda *_: manager.stop())
    print("service-manager: started %d" % manager.start(), flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
