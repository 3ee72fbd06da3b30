"""Serve a demo web with nginx, for benchmarks that must rule the web server out.

Why: the Python demo server is lean, but on a 2-core box it still shares CPU with the
crawler being measured. When ``nginx`` is installed, the benchmark can serve the same
bytes from nginx (C, sendfile, multiple workers) and compare. The web is written to a
directory tree (one directory per host) plus a config with one ``server`` block per host
listening on that host's own loopback IP, and nginx's access log is parsed into the same
record shape as :func:`streams.demo.server.read_request_log`.

Differences from the Python server worth knowing: nginx picks the site by the local
address (one server block per IP), ignores query strings when serving files (exactly
what the generator promises: ``?ref=x`` variants serve their base page's bytes), and
times requests with millisecond resolution (``start = $msec - $request_time``).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.demo.serving import bind_same_port
from streams.demo.webgen import DemoWeb, WebSpec

__all__ = [
    "INDEX_FILE",
    "NginxServer",
    "nginx_binary",
    "read_nginx_access_log",
    "start_nginx",
    "write_nginx_config",
    "write_site",
]

INDEX_FILE = "__index__.html"  # what "/" maps to; an unlikely name so it is never linked
_LOG_FORMAT = (
    "$host $request_uri $msec $request_time $status $remote_addr:$remote_port "
    "$server_addr $request_method"
)


def nginx_binary() -> str | None:
    """Path of nginx if installed (also looks in sbin dirs, often missing from PATH)."""
    found = shutil.which("nginx")
    if found:
        return found
    for candidate in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def write_site(web: DemoWeb, root: str | os.PathLike[str]) -> Path:
    """Write every served page of web (bound to its port) under root/<host>/.

    ``www.`` aliases get no directory of their own: their server block shares the host's.
    """
    root_path = Path(root)
    made: set[Path] = set()
    for host in web.hosts:
        host_dir = root_path / host
        host_dir.mkdir(parents=True, exist_ok=True)
        page = web.page(host, "/robots.txt")
        assert page is not None
        (host_dir / "robots.txt").write_bytes(page[2])
    for host, target in web.served_targets():
        if host not in web.hosts or "?" in target:
            continue  # aliases share the host's files; ?query variants are the base file
        page = web.page(host, target)
        assert page is not None
        relative = INDEX_FILE if target == "/" else target.lstrip("/")
        path = root_path / host / relative
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(page[2])
    return root_path


def _temp_path_directives(binary: str) -> list[str]:
    """Point every compiled-in temp path into our directory (defaults need root)."""
    try:
        info = subprocess.run(
            [binary, "-V"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.TimeoutExpired):
        info = ""
    names = re.findall(r"--http-([a-z-]+)-temp-path=", info) or ["client-body", "proxy"]
    return [f"{name.replace('-', '_')}_temp_path" for name in names]


#: Connections per nginx worker.
_CONNECTIONS = 4096


def _descriptor_limit() -> int:
    """The open-files limit nginx's workers get: this process's hard limit (nginx
    raises its workers' soft limit to it with worker_rlimit_nofile)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 1 << 20:
        hard = 1 << 20
    return max(1024, int(hard))


def write_nginx_config(
    web: DemoWeb,
    workdir: str | os.PathLike[str],
    *,
    site_root: str | os.PathLike[str],
    port: int,
    binary: str = "nginx",
    workers: int = 2,
) -> Path:
    """Write workdir/nginx.conf: one server block per host, access log in our format."""
    work = Path(workdir).resolve()
    temp = work / "temp"
    temp.mkdir(parents=True, exist_ok=True)
    site = Path(site_root).resolve()
    nofile = _descriptor_limit()
    lines = [
        "daemon off;",
        "master_process on;",
        f"worker_processes {workers};",
        f"pid {work / 'nginx.pid'};",
        f"error_log {work / 'error.log'} warn;",
    ]
    if os.geteuid() == 0:
        # Workers would otherwise drop to nobody/www-data and fail to read a private tmpdir.
        lines.append("user root;")
    lines += [
        f"worker_rlimit_nofile {nofile};",
        f"events {{ worker_connections {_CONNECTIONS}; }}",
        "http {",
        "    types { text/html html; text/plain txt; }",
        "    default_type application/octet-stream;",
        "    charset utf-8;",
        f"    log_format seine '{_LOG_FORMAT}';",
        f"    access_log {work / 'access.log'} seine buffer=256k flush=1s;",
        "    sendfile on;",
        "    tcp_nodelay on;",
        "    keepalive_timeout 65;",
        "    keepalive_requests 1000000;",
        "    server_tokens off;",
        # Each cached file holds a descriptor: a cache bigger than the descriptor
        # limit leaves none for new connections or files (accept4/open fail with
        # "Too many open files" and requests get 500s mid-crawl).
        f"    open_file_cache max={max(256, nofile - _CONNECTIONS - 256)} inactive=120s;",
    ]
    for directive in _temp_path_directives(binary):
        lines.append(f"    {directive} {temp / directive};")
    aliases = set(web.all_host_names()) - set(web.hosts)
    for host in web.hosts:
        names = " ".join([host] + ([f"www.{host}"] if f"www.{host}" in aliases else []))
        lines += [
            "    server {",
            f"        listen {web.address_of(host)}:{port};",
            f"        server_name {names};",
            f"        root {site / host};",
            f"        index {INDEX_FILE};",
            "    }",
        ]
    lines.append("}")
    conf = work / "nginx.conf"
    conf.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return conf


def read_nginx_access_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """nginx's access log in `read_request_log`'s shape; start = $msec - $request_time.

    Sorted by end time: each worker buffers its own lines, so file order interleaves.
    """
    records: list[dict[str, Any]] = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split(" ")
        if len(fields) != 8:
            continue  # torn or foreign line
        host, uri, msec, request_time, status, peer, ip, method = fields
        end = float(msec)
        records.append(
            {
                "host": host,
                "path": uri,
                "start": end - float(request_time),
                "end": end,
                "status": int(status),
                "peer": peer,
                "ip": ip,
                "method": method,
            }
        )
    records.sort(key=lambda r: r["end"])
    return records


@dataclass
class NginxServer:
    """A running nginx serving a demo web; `stop()` (or ``with``) ends it, log flushed."""

    process: subprocess.Popen[bytes]
    web: DemoWeb
    port: int
    workdir: Path

    @property
    def resolve(self) -> dict[str, str]:
        return self.web.resolve_map(self.port)

    @property
    def seeds(self) -> list[str]:
        return self.web.seeds()

    @property
    def access_log(self) -> Path:
        return self.workdir / "access.log"

    def read_log(self) -> list[dict[str, Any]]:
        return read_nginx_access_log(self.access_log)

    def stop(self, timeout: float = 15.0) -> int:
        """Graceful quit (flushes the buffered access log); escalates if it overruns."""
        proc = self.process
        for sig in (signal.SIGQUIT, signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            try:
                if sig == signal.SIGKILL:
                    os.killpg(proc.pid, sig)  # its own session: master and workers only
                else:
                    proc.send_signal(sig)
                proc.wait(timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
        return proc.wait(timeout)

    def __enter__(self) -> NginxServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_listening(
    proc: subprocess.Popen[bytes], addresses: Sequence[tuple[str, int]], deadline: float
) -> bool:
    """True once every address accepts a connection; False if nginx exited first."""
    pending = list(addresses)
    delay = 0.005
    while pending:
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            raise TimeoutError("nginx did not start listening in time")
        try:
            with socket.create_connection(pending[0], timeout=1.0):
                pending.pop(0)
                continue
        except OSError:
            pass
        time.sleep(delay)  # polling a condition, bounded by the deadline above
        delay = min(delay * 2, 0.1)
    return True


def start_nginx(
    web_or_spec: DemoWeb | WebSpec,
    workdir: str | os.PathLike[str],
    *,
    port: int = 0,
    workers: int = 2,
    timeout: float = 60.0,
    attempts: int = 5,
    binary: str | None = None,
) -> NginxServer:
    """Write the web and a config under workdir, start nginx (foreground), wait until listening.

    Port 0 picks one free on every host IP (briefly binding it, then handing it to nginx);
    if something grabs it in between, the site is rewritten for a new port and retried.
    """
    exe = binary or nginx_binary()
    if exe is None:
        raise FileNotFoundError("nginx is not installed")
    web = web_or_spec if isinstance(web_or_spec, DemoWeb) else DemoWeb(web_or_spec)
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    ips = list(dict.fromkeys(web.address_of(h) for h in web.hosts))
    deadline = time.monotonic() + timeout
    for _ in range(attempts if port == 0 else 1):
        chosen = port
        if chosen == 0:
            socks = bind_same_port(ips, 0)
            chosen = socks[0].getsockname()[1]
            for sock in socks:
                sock.close()
        bound = web.with_port(chosen)
        site = work / "site"
        if site.exists():
            shutil.rmtree(site)
        write_site(bound, site)
        conf = write_nginx_config(
            bound, work, site_root=site, port=chosen, binary=exe, workers=workers
        )
        (work / "access.log").unlink(missing_ok=True)
        with open(work / "nginx.stderr", "wb") as err:
            proc = subprocess.Popen(
                [exe, "-p", str(work), "-c", str(conf), "-e", str(work / "error.log")],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        try:
            up = _wait_listening(proc, [(ips[0], chosen), (ips[-1], chosen)], deadline)
        except BaseException:
            NginxServer(proc, bound, chosen, work).stop()
            raise
        if up:
            return NginxServer(proc, bound, chosen, work)
        errors = (work / "error.log").read_text(errors="replace") if port == 0 else ""
        if "Address already in use" not in errors:
            break
    log = work / "error.log"
    detail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    raise RuntimeError(f"nginx failed to start: {detail}")
