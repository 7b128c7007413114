"""``lograft rest-proxy``: serve the HTTP/JSON proxy of :mod:`cluster.rest_proxy` (Confluent's
REST Proxy shape) in front of the cluster named by ``--bootstrap``."""

from __future__ import annotations

import argparse
import logging

from ._args import Streams, positive

__all__ = ["register", "run"]

log = logging.getLogger(__name__)

DESCRIPTION = """\
An HTTP/JSON proxy in the shape of Confluent's REST Proxy, so that curl and browsers can
produce and read: v3 clusters, topics, partitions and produce
(POST /v3/clusters/ID/topics/TOPIC/records), v2 produce (POST /topics/TOPIC) and v2
consumer instances (POST /consumers/GROUP, then .../subscription, .../records,
.../offsets). It uses the Python client against the cluster of --bootstrap and runs until
SIGINT or SIGTERM. Errors are Confluent's {"error_code": ..., "message": ...}.
See docs/rest-proxy.md."""

EPILOG = """\
examples:
  lograft rest-proxy                                   # http://127.0.0.1:8082
  lograft --log-level INFO rest-proxy --listen 0.0.0.0:8082
  curl -s localhost:8082/v3/clusters"""


def _listen(text: str) -> tuple[str, int]:
    # The proxy is imported here, not at the top: other commands do not load the HTTP server.
    from cluster.rest_proxy import parse_listen

    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``rest-proxy`` to the ``lograft`` parser."""
    parser = commands.add_parser(
        "rest-proxy",
        help="serve an HTTP/JSON proxy (Confluent REST Proxy shape) for curl and browsers",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=run)
    parser.add_argument(
        "--listen",
        type=_listen,
        default=("127.0.0.1", 8082),
        metavar="HOST:PORT",
        help="address to serve HTTP on (default 127.0.0.1:8082, Confluent's port)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=positive,
        default=4 * 1024 * 1024,
        help="largest request body accepted; larger ones get 413 (default %(default)s)",
    )
    parser.add_argument(
        "--consumer-instance-timeout-ms",
        type=positive,
        default=300000,
        help="close a consumer instance unused this long "
        "(consumer.instance.timeout.ms, default %(default)s)",
    )
    parser.add_argument(
        "--consumer-request-timeout-ms",
        type=positive,
        default=1000,
        help="how long a records GET without ?timeout= waits for records (default %(default)s)",
    )
    parser.add_argument(
        "--max-consumer-instances",
        type=positive,
        default=100,
        help="consumer instances this proxy holds at most (default %(default)s)",
    )


def run(args: argparse.Namespace, streams: Streams) -> int:
    """Serve until interrupted; exit code 0 (1 when it cannot listen)."""
    from cluster.rest_proxy import ProxySettings, serve

    host, port = args.listen
    settings = ProxySettings(
        bootstrap_servers=args.bootstrap,
        host=host,
        port=port,
        max_body_bytes=args.max_body_bytes,
        consumer_instance_timeout_ms=args.consumer_instance_timeout_ms,
        consumer_request_timeout_ms=args.consumer_request_timeout_ms,
        max_consumer_instances=args.max_consumer_instances,
        admin_timeout_ms=min(args.api_timeout_ms, 60000),
    )

    def ready(url: str) -> None:
        print(f"lograft rest-proxy: listening on {url} ({args.bootstrap})", file=streams.stderr)
        streams.stderr.flush()

    try:
        serve(settings, ready)
    except OSError as exc:  # the address is taken, or not this machine's
        print(f"lograft: cannot listen on {host}:{port}: {exc}", file=streams.stderr)
        return 1
    return 0
