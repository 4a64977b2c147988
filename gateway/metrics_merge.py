"""One Prometheus scrape for a fleet (`tokenwire up --replicas N`, or
--api-server-count K): a small HTTP server on loopback, the target of the
gateway's `GET /metrics` (metrics_route.py), that fetches every replica's
/metrics (vLLM's ``vllm:*`` and tokenwire's ``tokenwire_*``), labels each
sample ``replica="<r>"`` (replica r serves gRPC on --grpc-port+r; with K serving
processes also ``process="<i>"``) and merges the families, one HELP/TYPE
each (prometheus_client's parser and exposition).
``tokenwire_replica_up`` says whose scrape failed; a failed replica's
samples are left out, the others still answer.

The labels are added: vLLM's own (``model_name``, ``engine``) stay, so its
dashboards' queries and sums work as on one server, and ``by (replica)``
splits them. The replicas' URLs are fixed at
start (the operator's flags): nothing a caller names is fetched.

The gateway's ``/metrics`` takes no key (as vLLM's), so a scrape's cost is
bounded here: the merged page is kept ``cache_seconds`` (1 s) from the end
of its render, and one render runs at a time (scrapes that arrive during it
wait for it and share it), so a flood of scrapes costs at most one fan-out
of N x K fetches per second; at most ``max_clients`` (8) connections are
served at once, the others wait in the listen queue."""

from __future__ import annotations

import concurrent.futures
import http.server
import threading
import time
import urllib.request
from collections.abc import Iterable, Sequence
from typing import Any

REPLICA_LABEL = "replica"
PROCESS_LABEL = "process"  # with --api-server-count > 1
UP_METRIC = "tokenwire_replica_up"
MAX_BYTES = 64 * 1024 * 1024  # one replica's exposition, at most


def fetch(url: str, timeout: float) -> str:
    """One replica's exposition text (OSError / ValueError when it fails)."""
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # the operator's URL
        body = resp.read(MAX_BYTES + 1)
    if len(body) > MAX_BYTES:
        raise ValueError(f"{url}: more than {MAX_BYTES} bytes")
    return body.decode("utf-8")


Labels = dict[str, str]


def plan_targets(host: str, base_port: int, replicas: int,
                 processes: int = 1) -> list[tuple[Labels, str]]:
    """`tokenwire up`'s metrics ports: replica r's serving process i on
    base_port + r * processes + i (runtime/frontends.py), labelled replica
    (and, with several serving processes, process: each serves its own
    tokenwire_*, process 0 also every process's vllm:*)."""
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::", "localhost") else host
    host = f"[{host}]" if ":" in host else host
    return [({REPLICA_LABEL: str(r), **({PROCESS_LABEL: str(i)} if processes > 1 else {})},
             f"http://{host}:{base_port + r * processes + i}/metrics")
            for r in range(replicas) for i in range(processes)]


def merge(scraped: Sequence[tuple[Labels, str | None]]) -> list[Any]:
    """The metric families of every target's text (None: its scrape
    failed), each sample given its target's labels, plus UP_METRIC."""
    from prometheus_client.metrics_core import GaugeMetricFamily, Metric
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Any] = {}
    names = list(scraped[0][0]) if scraped else [REPLICA_LABEL]
    up = GaugeMetricFamily(UP_METRIC, "1 when the replica's /metrics answered this scrape",
                           labels=names)
    for labels, text in scraped:
        parsed: list[Any] = []
        if text is not None:
            try:
                parsed = list(text_string_to_metric_families(text))
            except ValueError:
                text = None
        up.add_metric([labels[n] for n in names], 0.0 if text is None else 1.0)
        for family in parsed:
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation,
                                                        family.type, family.unit)
            elif merged.type != family.type:
                continue  # a replica that disagrees on a metric's type: left out
            merged.samples.extend(s._replace(labels={**s.labels, **labels})
                                  for s in family.samples)
    return [*families.values(), up]


class _Families:
    """What prometheus_client's exposition reads (a registry's collect())."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = list(families)

    def collect(self) -> Iterable[Any]:
        return self._families


class _BoundedServer(http.server.ThreadingHTTPServer):
    """A thread per connection, at most `max_clients` at once: the accept
    loop waits for a free one (the others wait in the listen queue)."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: Any, max_clients: int) -> None:
        self._slots = threading.BoundedSemaphore(max_clients)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)  # type: ignore[misc]
        finally:
            self._slots.release()


class MetricsMerger:
    """The loopback server: GET /metrics scrapes every URL in `targets`
    (concurrently, each within `timeout` seconds) and answers the merge,
    rendered at most once per `cache_seconds`, for at most `max_clients`
    connections at once."""

    def __init__(self, targets: Sequence[tuple[Labels, str]], *, host: str = "127.0.0.1",
                 timeout: float = 5.0, cache_seconds: float = 1.0,
                 max_clients: int = 8) -> None:
        self.targets = list(targets)
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        self._render_lock = threading.Lock()  # one render at a time; the others share it
        self._page: tuple[float, bytes] | None = None  # (when its render ended, the page)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(16, max(1, len(self.targets))), thread_name_prefix="metrics-merge")
        merger = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                from prometheus_client.exposition import CONTENT_TYPE_LATEST

                body = merger.page()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # Envoy's access log has the calls

        Handler.timeout = 30  # a connection that sends nothing frees its slot
        self._server = _BoundedServer((host, 0), Handler, max_clients)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="metrics-merge")

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def page(self) -> bytes:
        """The merged page: the last one if rendered under `cache_seconds`
        ago, else a new render (one at a time: a scrape that arrives during
        a render waits for it and answers it)."""
        with self._render_lock:
            cached = self._page
            if cached is not None and time.monotonic() - cached[0] < self.cache_seconds:
                return cached[1]
            body = self.render()
            self._page = (time.monotonic(), body)
            return body

    def render(self) -> bytes:
        """Scrape every target now and merge (uncached)."""
        from prometheus_client.exposition import generate_latest

        def one(target: tuple[Labels, str]) -> tuple[Labels, str | None]:
            try:
                return target[0], fetch(target[1], self.timeout)
            except (OSError, ValueError):
                return target[0], None

        scraped = list(self._pool.map(one, self.targets))
        return generate_latest(_Families(merge(scraped)))  # type: ignore[arg-type]

    def start(self) -> MetricsMerger:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)
