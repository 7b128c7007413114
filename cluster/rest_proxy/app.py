"""The aiohttp application: routes, the error middleware, startup and shutdown, ``serve``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from lograft.protocol.errors import LograftError

from . import consumers, metadata, produce
from .context import CONTEXT, ProxyContext
from .errors import RestError, error_response, from_lograft
from .settings import ProxySettings

__all__ = ["ACCESS_LOG_FORMAT", "build_app", "serve"]

logger = logging.getLogger(__name__)

ACCESS_LOG_FORMAT = 'request remote=%a line="%r" status=%s bytes=%b duration_s=%Tf'
"""One key=value line per request on the ``aiohttp.access`` logger."""

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def _errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every failure as Confluent's ``{"error_code", "message"}``, never a stack trace."""
    v3 = request.path.startswith("/v3")
    try:
        return await handler(request)
    except RestError as exc:
        return exc.response(v3)
    except LograftError as exc:
        return from_lograft(exc).response(v3)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = f"HTTP {exc.status} {exc.reason}"
        return error_response(exc.status, {"error_code": exc.status, "message": message})
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("request failed method=%s path=%s", request.method, request.path)
        return error_response(500, {"error_code": 500, "message": "Internal server error"})


def _routes(app: web.Application) -> None:
    cluster = "/v3/clusters/{cluster_id}"
    topic = cluster + "/topics/{topic_name}"
    instance = "/consumers/{group}/instances/{instance}"
    app.router.add_get("/v3/clusters", metadata.list_clusters)
    app.router.add_get(cluster, metadata.get_cluster)
    app.router.add_get(cluster + "/topics", metadata.list_topics)
    app.router.add_post(cluster + "/topics", metadata.create_topic)
    app.router.add_get(topic, metadata.get_topic)
    app.router.add_get(topic + "/partitions", metadata.list_partitions)
    app.router.add_get(topic + "/partitions/{partition_id}", metadata.get_partition)
    app.router.add_post(topic + "/records", produce.produce_v3)
    app.router.add_post("/topics/{topic}", produce.produce_v2)
    app.router.add_post("/consumers/{group}", consumers.create_instance)
    app.router.add_delete(instance, consumers.delete_instance)
    app.router.add_post(instance + "/subscription", consumers.subscribe)
    app.router.add_get(instance + "/subscription", consumers.get_subscription)
    app.router.add_delete(instance + "/subscription", consumers.delete_subscription)
    app.router.add_post(instance + "/assignments", consumers.set_assignments)
    app.router.add_get(instance + "/assignments", consumers.get_assignments)
    app.router.add_get(instance + "/records", consumers.read_records)
    app.router.add_post(instance + "/offsets", consumers.commit_offsets)
    app.router.add_get(instance + "/offsets", consumers.committed_offsets)
    app.router.add_post(instance + "/positions", consumers.seek)
    app.router.add_post(instance + "/positions/beginning", consumers.seek_to_beginning)
    app.router.add_post(instance + "/positions/end", consumers.seek_to_end)


def build_app(settings: ProxySettings) -> web.Application:
    """The proxy's application; its clients are made at startup and closed at cleanup."""
    # client_max_size also bounds aiohttp's own body reads; ours stop at the same size.
    app = web.Application(middlewares=[_errors], client_max_size=settings.max_body_bytes)
    _routes(app)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        context = ProxyContext(settings)
        app[CONTEXT] = context
        await context.start()
        logger.info(
            "rest proxy started url=%s bootstrap=%s", settings.url, settings.bootstrap_servers
        )
        yield
        await context.close()
        logger.info("rest proxy stopped url=%s", settings.url)

    app.cleanup_ctx.append(lifecycle)
    return app


def serve(settings: ProxySettings, ready: Callable[[str], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM; ``ready(url)`` is called once it listens."""

    def announce(_: str) -> None:
        if ready is not None:
            ready(settings.url)

    web.run_app(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        access_log_format=ACCESS_LOG_FORMAT,
        print=announce,
        handle_signals=True,
        shutdown_timeout=10.0,
    )
