"""``lograft rest-proxy``: an HTTP/JSON proxy in the shape of Confluent's REST Proxy.

``curl`` and browsers produce and read through it; it talks to the cluster only with the
Python client (:mod:`cluster.client`), so every broker rule (acks, ``min.insync.replicas``,
groups, offsets) is the cluster's own. Served (docs/rest-proxy.md):

* v3: ``GET /v3/clusters[/{id}]``, ``GET|POST /v3/clusters/{id}/topics``,
  ``GET .../topics/{topic}[/partitions[/{partition}]]``, ``POST .../topics/{topic}/records``;
* v2 produce: ``POST /topics/{topic}``;
* v2 consumers: ``POST /consumers/{group}``, then under
  ``/consumers/{group}/instances/{instance}``: ``subscription``, ``assignments``,
  ``records``, ``offsets``, ``positions[/beginning|/end]`` and ``DELETE``.

Errors are Confluent's ``{"error_code", "message"}`` (:mod:`cluster.rest_proxy.errors`).
"""

from .app import build_app, serve
from .settings import DEFAULT_LISTEN, DEFAULT_MAX_BODY_BYTES, ProxySettings, parse_listen

__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY_BYTES",
    "ProxySettings",
    "build_app",
    "parse_listen",
    "serve",
]
