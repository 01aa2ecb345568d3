"""Start and stop real Dask schedulers and workers for end-to-end tests.

The processes run the interpreter of one Dask version (a
daskversions.DaskVersion; default Debian's 2022.12.1 under /usr/bin/python3).
Every process is started in its own session (process group) and stopped by
that group's id: SIGTERM, then SIGKILL after a grace period. `DaskCluster`
is a context manager, so the processes go away even when a test fails, and
their logs are kept in a temporary directory that `logs()` returns for
failure messages.

    with DaskCluster(daskversions.NEWEST) as cluster:
        sched = cluster.start_scheduler(env={"DASK_DISTRIBUTED__COMM__COMPRESSION": "lz4"},
                                        host="127.0.0.2")
        w1 = cluster.start_worker(sched, name="w1", host="127.0.0.3")
        w2 = cluster.start_worker(sched, name="w2", host="127.0.0.4",
                                  env={"DASK_DISTRIBUTED__COMM__COMPRESSION": "zstd"})
        cluster.wait_for_workers(sched, 2)
        ... sched.address, w1.address ...

Hosts: 127.0.0.1 for every process makes them one host to Dask; distinct
loopback addresses (127.0.0.2, 127.0.0.3, ...) make them different hosts,
since Dask 2023.5 and later compare the local and peer IP of a connection
(and a connection from this test, on 127.0.0.1, to 127.0.0.2 has different
ones). No privileges are needed for either.

TLS: pass `tls=TlsFiles(ca, cert, key)` to start_scheduler/start_worker;
`make_tls_files(directory)` creates a CA and certificates with the openssl
command. Addresses are then tls://.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

PYTHON = "/usr/bin/python3"
START_TIMEOUT = 60.0


@dataclass
class TlsFiles:
    ca: str
    cert: str
    key: str


@dataclass
class DaskProcess:
    kind: str  # "scheduler" or "worker"
    proc: subprocess.Popen
    log_path: str
    address: str = ""
    name: str = ""
    env: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def _child_env(extra: dict | None) -> dict:
    env = dict(os.environ)
    # Keep the processes quiet and independent of the user's Dask config.
    env.setdefault("DASK_DISTRIBUTED__LOGGING__DISTRIBUTED", "info")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env


def stop_process(proc: subprocess.Popen, grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Stops a process started with start_new_session=True, by its group:
    `sig` (tcpdump wants SIGINT to flush its file), then SIGKILL after
    `grace` seconds."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace)


def make_tls_files(directory: str) -> tuple[TlsFiles, TlsFiles]:
    """A CA, a server certificate and a client certificate (openssl command).

    Returns (server, client) TlsFiles sharing the CA. Dask does not check host
    names, but the server certificate still names 127.0.0.1 and localhost."""
    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=dask-caps test CA")
    with open(os.path.join(directory, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=CA:FALSE\n")
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN=dask-caps test {name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", "san.ext")
    p = lambda n: os.path.join(directory, n)  # noqa: E731
    return (TlsFiles(p("ca.pem"), p("server.pem"), p("server.key")),
            TlsFiles(p("ca.pem"), p("client.pem"), p("client.key")))


def security_for(tls: TlsFiles | None):
    """A distributed.security.Security for client connections, or None."""
    if tls is None:
        return None
    from distributed.security import Security
    return Security(tls_ca_file=tls.ca, tls_client_cert=tls.cert,
                    tls_client_key=tls.key, require_encryption=True)


def identity(address: str, tls: TlsFiles | None = None, timeout: float = 10.0) -> dict:
    """The identity reply of a Dask server, asked through distributed.core.rpc."""
    from distributed.core import rpc

    async def go():
        sec = security_for(tls)
        args = sec.get_connection_args("client") if sec else {}
        async with rpc(address, timeout=timeout, connection_args=args) as r:
            return await r.identity()

    return asyncio.run(go())


class DaskCluster:
    """Real Dask processes for one test; stops them all on exit."""

    def __init__(self, dask=None):
        """dask: a daskversions.DaskVersion (its interpreter runs the
        processes, its oracle asks them for their identity), an interpreter
        path, or None for /usr/bin/python3."""
        self.dask = dask if dask is not None and not isinstance(dask, str) else None
        self.python = self.dask.python if self.dask else (dask or PYTHON)
        self.tmp = tempfile.TemporaryDirectory(prefix="daskcaps-cluster-")
        self.processes: list[DaskProcess] = []

    def __enter__(self) -> "DaskCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def stop(self) -> None:
        """Stops every process (their logs stay readable)."""
        for p in reversed(self.processes):
            stop_process(p.proc)

    def close(self) -> None:
        """Stops every process and removes the logs."""
        self.stop()
        self.processes.clear()
        self.tmp.cleanup()

    def logs(self) -> str:
        return "\n".join(f"--- {p.kind} {p.name} (pid {p.pid}) ---\n{p.log()}" for p in self.processes)

    def _spawn(self, kind: str, name: str, args: list[str], env: dict | None) -> DaskProcess:
        log_path = os.path.join(self.tmp.name, f"{kind}-{name}-{len(self.processes)}.log")
        log = open(log_path, "wb")
        proc = subprocess.Popen([self.python, "-m", *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=_child_env(env),
                                cwd=self.tmp.name, start_new_session=True)
        log.close()
        p = DaskProcess(kind, proc, log_path, name=name, env=dict(env or {}))
        self.processes.append(p)
        return p

    def start_scheduler(self, env: dict | None = None, tls: TlsFiles | None = None,
                        extra_args: list[str] | None = None, host: str = "127.0.0.1",
                        dashboard: bool = False) -> DaskProcess:
        """A scheduler on `host`, random port, no dashboard (`dashboard`: one
        on `host`, random port; dashboard_address() reads it from the log)."""
        sfile = os.path.join(self.tmp.name, f"scheduler-{len(self.processes)}.json")
        args = ["distributed.cli.dask_scheduler", "--host", host, "--port", "0",
                *_dashboard_args(dashboard, host), "--no-show", "--scheduler-file", sfile]
        if tls:
            args += ["--protocol", "tls", "--tls-ca-file", tls.ca, "--tls-cert", tls.cert,
                     "--tls-key", tls.key]
        args += extra_args or []
        p = self._spawn("scheduler", "scheduler", args, env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if p.proc.poll() is not None:
                raise RuntimeError(f"scheduler exited with {p.proc.returncode}:\n{p.log()}")
            try:
                with open(sfile) as f:
                    info = json.load(f)
                p.address = info["address"]
                return p
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        raise RuntimeError(f"scheduler did not start within {START_TIMEOUT} s:\n{p.log()}")

    def start_worker(self, scheduler: DaskProcess | str, name: str, env: dict | None = None,
                     tls: TlsFiles | None = None, nanny: bool = False,
                     extra_args: list[str] | None = None, host: str = "127.0.0.1",
                     dashboard: bool = False) -> DaskProcess:
        """A worker (no nanny unless asked) with one thread on `host`
        (`dashboard`: as for start_scheduler).

        Its address is filled in by wait_for_workers()."""
        address = scheduler.address if isinstance(scheduler, DaskProcess) else scheduler
        args = ["distributed.cli.dask_worker", address, "--name", name, "--nthreads", "1",
                "--host", host, *_dashboard_args(dashboard, host),
                "--nanny" if nanny else "--no-nanny", "--memory-limit", "0"]
        if tls:
            args += ["--protocol", "tls", "--tls-ca-file", tls.ca, "--tls-cert", tls.cert,
                     "--tls-key", tls.key]
        args += extra_args or []
        return self._spawn("worker", name, args, env)

    def wait_for_workers(self, scheduler: DaskProcess, count: int,
                         tls: TlsFiles | None = None) -> dict:
        """Waits until the scheduler lists `count` workers; returns its identity
        and fills in the workers' addresses by name."""
        deadline = time.monotonic() + START_TIMEOUT
        ident = {}
        while time.monotonic() < deadline:
            for p in self.processes:
                if p.proc.poll() is not None:
                    raise RuntimeError(f"{p.kind} {p.name} exited with {p.proc.returncode}:\n{p.log()}")
            if self.dask is not None:
                ident = self.dask.oracle().call(
                    "rpc_call", scheduler.address, "identity",
                    tls=(tls.ca, tls.cert, tls.key) if tls else None)
            else:
                ident = identity(scheduler.address, tls=tls)
            if len(ident.get("workers", {})) >= count:
                by_name = {str(w.get("name")): addr for addr, w in ident["workers"].items()}
                for p in self.processes:
                    if p.kind == "worker" and p.name in by_name:
                        p.address = by_name[p.name]
                return ident
            time.sleep(0.2)
        raise RuntimeError(f"{count} workers did not register within {START_TIMEOUT} s:\n{self.logs()}")


def _dashboard_args(dashboard: bool, host: str) -> list[str]:
    return ["--dashboard-address", f"{host}:0"] if dashboard else ["--no-dashboard"]


def dashboard_address(process: DaskProcess, timeout: float = START_TIMEOUT) -> str:
    """host:port of the HTTP server (dashboard, /metrics) a process started
    with dashboard=True serves, as its log names it."""
    import re

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"dashboard at:\s+(?:https?://)?([0-9.]+:[0-9]+)", process.log())
        if m:
            return m.group(1)
        time.sleep(0.1)
    raise RuntimeError(f"{process.kind} {process.name} named no dashboard:\n{process.log()}")


def read_handshake(address: str, timeout: float = 10.0) -> dict:
    """The handshake a Dask listener writes first, read with a raw socket
    (tcp:// only). Sends nothing, so the peer sees a client that went away."""
    import socket
    import struct

    import msgpack

    host, port = address.split("://", 1)[-1].rsplit(":", 1)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as s:
        def exact(n):
            buf = b""
            while len(buf) < n:
                chunk = s.recv(n - len(buf))
                if not chunk:
                    raise EOFError("peer closed")
                buf += chunk
            return buf

        (length,) = struct.unpack("<Q", exact(8))
        body = exact(length)
        (nframes,) = struct.unpack_from("<Q", body, 0)
        lengths = struct.unpack_from(f"<{nframes}Q", body, 8)
        frame0 = body[8 + 8 * nframes: 8 + 8 * nframes + lengths[0]]
        return msgpack.loads(frame0, raw=False, use_list=True, strict_map_key=False)


if __name__ == "__main__":
    # Manual use: start a scheduler and N workers, print addresses, wait.
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with DaskCluster() as c:
        s = c.start_scheduler()
        for i in range(n):
            c.start_worker(s, f"w{i}")
        c.wait_for_workers(s, n)
        print(s.address, *[p.address for p in c.processes if p.kind == "worker"], flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
