#!/usr/bin/env python3
"""A loopback-only stand-in for docker-proxy, for scripts/sam-local.sh on a machine whose Docker
daemon runs without a bridge (`dockerd --bridge=none`): there a container has only its own `lo`,
and the port SAM CLI publishes for the runtime interface emulator is never bound.

It watches the daemon's events; when a container starts, it
- listens on the host's 127.0.0.1 on each host port the container publishes, and copies each
  connection to the published container port on the container's own 127.0.0.1;
- for each argument INNER=OUTER, listens on the container's 127.0.0.1:INNER (events/env.json's
  ports of DynamoDB Local, the stand-in OpenAI and Secrets Manager) and copies each connection
  to the host's 127.0.0.1:OUTER, where that stand-in listens (`--add-host
  host.docker.internal:127.0.0.1` points env.json's URLs at the container's loopback).
Sockets in the container's network namespace are made by a thread that has joined it (setns);
needs root. Nothing listens anywhere but on loopback.

    scripts/sam-local-relay.py 8000=41234 8081=41235 8082=41236 &
"""

import ctypes
import json
import os
import socket
import subprocess
import sys
import threading
import time

CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)
LOOPBACK = "127.0.0.1"
# How long a connection into a container waits for its listener (the emulator starts a moment
# after the container).
CONNECT_WITHIN_SECS = 10.0


def log(message):
    print(f"sam-local-relay: {message}", file=sys.stderr, flush=True)


def in_netns(pid, make):
    """`make()` run by a thread in the network namespace of process `pid`; its result."""
    result = {}

    def run():
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if LIBC.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            result["value"] = make()
        except Exception as e:  # handed to the caller
            result["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def listener(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((LOOPBACK, port))
    s.listen(64)
    return s


def connect(port):
    deadline = time.monotonic() + CONNECT_WITHIN_SECS
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.connect((LOOPBACK, port))
            return s
        except ConnectionRefusedError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def copy(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def serve(server, open_peer, name):
    """Accepts on `server` until it is closed; each connection copied to `open_peer()`."""
    while True:
        try:
            client, _ = server.accept()
        except OSError:
            return

        def pipe(client=client):
            try:
                peer = open_peer()
            except OSError as e:
                log(f"{name}: {e}")
                client.close()
                return
            back = threading.Thread(target=copy, args=(peer, client), daemon=True)
            back.start()
            copy(client, peer)
            back.join()
            client.close()
            peer.close()

        threading.Thread(target=pipe, daemon=True).start()


def relay(container, to_host, listening):
    info = json.loads(subprocess.run(["docker", "inspect", container], check=True,
                                     capture_output=True, text=True).stdout)[0]
    pid = info["State"]["Pid"]
    if not pid or info["HostConfig"].get("NetworkMode") == "host":
        return
    servers = []
    for spec, bindings in (info["HostConfig"].get("PortBindings") or {}).items():
        inner = int(spec.split("/")[0])
        for binding in bindings or []:
            if not binding.get("HostPort"):
                continue
            outer = int(binding["HostPort"])
            server = listener(outer)
            servers.append(server)
            threading.Thread(target=serve, daemon=True, args=(
                server, lambda inner=inner: in_netns(pid, lambda: connect(inner)),
                f"{container[:12]} :{outer} -> :{inner}")).start()
    for inner, outer in to_host:
        server = in_netns(pid, lambda inner=inner: listener(inner))
        servers.append(server)
        threading.Thread(target=serve, daemon=True, args=(
            server, lambda outer=outer: connect(outer),
            f"{container[:12]} :{inner} -> host :{outer}")).start()
    listening[container] = servers


def main():
    to_host = [tuple(int(p) for p in arg.split("=")) for arg in sys.argv[1:]]
    listening = {}
    events = subprocess.Popen(
        ["docker", "events", "--filter", "type=container", "--filter", "event=start",
         "--filter", "event=die", "--format", "{{.Status}} {{.ID}}"],
        stdout=subprocess.PIPE, text=True)
    log(f"watching the daemon's events (to the host: {to_host})")
    for line in events.stdout:
        status, container = line.split()
        try:
            if status == "start":
                relay(container, to_host, listening)
            else:
                for server in listening.pop(container, []):
                    try:
                        server.shutdown(socket.SHUT_RDWR)  # wakes its accept()
                    except OSError:
                        pass
                    server.close()
        except (OSError, subprocess.CalledProcessError, KeyError, ValueError) as e:
            log(f"{container[:12]}: {e}")


if __name__ == "__main__":
    main()
