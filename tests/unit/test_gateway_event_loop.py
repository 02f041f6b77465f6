"""Every route and every dependency of the gateway runs on the event loop: FastAPI sends a plain `def` to a
worker thread, a hop and a loop wake-up per request (the sequential round trip paid two of them)."""

import inspect

from fastapi.routing import APIRoute

from farm.app.gateway.app import create_app
from farm.app.gateway.auth import Directory


def _routes(routes):
    """The API routes, through included routers (kept nested by FastAPI)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _routes(inner.routes)
        for dependency in getattr(inner, "dependencies", None) or ():
            yield dependency


def _calls(dependant):
    for dependency in dependant.dependencies:
        yield dependency.call
        yield from _calls(dependency)


def test_no_route_or_dependency_of_the_gateway_is_sent_to_a_worker_thread():
    app = create_app(lambda: None, Directory(lambda token: None))
    found = list(_routes(app.routes))
    routes = [route for route in found if isinstance(route, APIRoute)]
    routers = [("router", depends.dependency) for depends in found if not isinstance(depends, APIRoute)]
    on_threads = {f"{path}: {getattr(call, '__qualname__', call)}"
                  for path, call in [*routers, *((route.path, call) for route in routes
                                                 for call in (route.endpoint, *_calls(route.dependant)))]
                  if call is not None and not inspect.iscoroutinefunction(call)
                  and not inspect.iscoroutinefunction(getattr(call, "__call__", None))}
    assert routes and not on_threads, sorted(on_threads)[:10]
