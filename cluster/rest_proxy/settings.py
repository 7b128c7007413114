"""The proxy's settings: where it listens, which cluster it fronts, and its limits."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY_BYTES",
    "ProxySettings",
    "parse_listen",
]

DEFAULT_LISTEN = "127.0.0.1:8082"
"""Confluent REST Proxy's port, on the loopback interface unless told otherwise."""

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
"""Largest request body accepted (a bigger one is answered 413)."""


@dataclass(frozen=True, slots=True)
class ProxySettings:
    """Everything ``lograft rest-proxy`` is configured with.

    ``consumer_instance_timeout_ms`` is Confluent's ``consumer.instance.timeout.ms``: an
    instance nobody has used for that long is closed (it leaves its group).
    ``consumer_request_timeout_ms`` is how long a records GET waits for records when it
    gives no ``timeout``; ``consumer_request_max_bytes`` caps the bytes of keys and values
    one records GET returns (Confluent's ``consumer.request.max.bytes``).
    """

    bootstrap_servers: str
    host: str = "127.0.0.1"
    port: int = 8082
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    consumer_instance_timeout_ms: int = 300_000
    consumer_request_timeout_ms: int = 1_000
    consumer_request_max_bytes: int = 64 * 1024 * 1024
    max_consumer_instances: int = 100
    admin_timeout_ms: int = 15_000
    max_poll_timeout_ms: int = 30_000

    @property
    def url(self) -> str:
        """``http://host:port`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as ``(host, port)``; ``ValueError`` if bad."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    port = int(port_text)
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is not in 1..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port
