"""OpenTelemetry traces, off by default: a span per HTTP request, per pipeline stage and per store
call of a retrieval, exported over OTLP/HTTP (protobuf).

Whether it is on is decided once at start from the standard variables (:class:`hrt.config.Settings`
reads them under their own names): ``OTEL_SDK_DISABLED=true`` turns it off whatever else is set;
else ``OTEL_TRACES_EXPORTER`` ``otlp`` or ``console`` turns it on (``none``, or anything else, off);
unset, it is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is
set. Everything else (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, the exporter's headers
and timeout, the sampler, the batch processor's sizes) is read by the OpenTelemetry SDK itself.

The ``opentelemetry`` packages are the optional extra ``hrt[otel]``, imported only when tracing is
on: with it off, a request pays one ``None`` check per stage and nothing per store call (the ports
are not wrapped). Spans carry names, durations and counts; a user id only as a hash
(:func:`user_hash`), never a phrase, a query or a record's text. An incoming ``traceparent`` is the
request span's parent. ``Server-Timing`` is computed as before, apart from the spans.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

T = TypeVar("T")

INSTRUMENTATION = "hrt"
ON_EXPORTERS = ("otlp", "console")
Attributes = Mapping[str, str | int | float | bool]


def tracing_wanted(
    traces_exporter: str, otlp_endpoint: str, otlp_traces_endpoint: str, sdk_disabled: bool
) -> str | None:
    """The exporter the standard variables ask for (``otlp`` or ``console``), or None: off."""
    if sdk_disabled:
        return None
    chosen = traces_exporter.strip().lower()
    if chosen:
        # the variable may list several exporters; the first one HRT knows is used
        known = [name.strip() for name in chosen.split(",") if name.strip() in ON_EXPORTERS]
        return known[0] if known else None
    return "otlp" if (otlp_endpoint.strip() or otlp_traces_endpoint.strip()) else None


def user_hash(user_id: str) -> str:
    """A user id as spans carry it: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(user_id.encode()).hexdigest()[:16]


def _count(value: Any) -> int | None:
    if isinstance(value, str | bytes):
        return None
    if isinstance(value, Sequence | Mapping | set | frozenset):
        return len(value)
    return None


class Tracing:
    """The tracer HRT's spans come from, over an SDK ``TracerProvider`` (its processors and
    exporter decide where they go: OTLP, the console, or a test's in-memory exporter)."""

    def __init__(self, provider: TracerProvider) -> None:
        from opentelemetry.trace import SpanKind
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.tracer: Tracer = provider.get_tracer(INSTRUMENTATION)
        self._propagator = TraceContextTextMapPropagator()
        self._server, self._internal = SpanKind.SERVER, SpanKind.INTERNAL

    @contextmanager
    def span(self, name: str, attributes: Attributes | None = None) -> Iterator[Span]:
        """A span, current while the block runs; an exception escaping it marks it as an error."""
        with self.tracer.start_as_current_span(name, kind=self._internal, attributes=attributes) as span:
            yield span

    @contextmanager
    def request_span(self, headers: Sequence[tuple[bytes, bytes]], method: str) -> Iterator[Span]:
        """The span of one HTTP request, child of the caller's ``traceparent`` when it sent one."""
        carrier: MutableMapping[str, str] = {}
        for name, value in headers:
            if name in (b"traceparent", b"tracestate"):
                carrier[name.decode("latin-1")] = value.decode("latin-1")
        parent = self._propagator.extract(carrier)
        attrs = {"http.request.method": method}
        with self.tracer.start_as_current_span(method, context=parent, kind=self._server, attributes=attrs) as span:
            yield span

    def traced(self, port: T, name: str) -> T:
        """``port`` with a span around each of its coroutine methods (``hrt.store <name>.<method>``:
        the store's class, the counts of the sequences it was given and returned)."""
        return cast(T, _TracedPort(port, name, self))

    def shutdown(self) -> None:
        """Export what is buffered, then stop (the server's end)."""
        self.provider.shutdown()


class _TracedPort:
    """A store port whose coroutine methods each run in a span; every other attribute is the port's."""

    def __init__(self, inner: Any, name: str, tracing: Tracing) -> None:
        self._inner = inner
        self._name = name
        self._tracing = tracing
        self._store = type(inner).__name__

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr.startswith("_") or not inspect.iscoroutinefunction(value):
            return value
        return self._wrap(attr, value)

    def _wrap(self, attr: str, method: Callable[..., Any]) -> Callable[..., Any]:
        span_name = f"hrt.store {self._name}.{attr}"

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            attributes: dict[str, str | int] = {"hrt.store.port": self._name, "hrt.store.class": self._store}
            for i, arg in enumerate((*args[1:], *kwargs.values())):  # the first is the user id
                n = _count(arg)
                if n is not None:
                    attributes[f"hrt.store.arg{i}.count"] = n
            if args and isinstance(args[0], str):
                attributes["hrt.user.hash"] = user_hash(args[0])
            with self._tracing.span(span_name, attributes) as span:
                result = await method(*args, **kwargs)
                n = _count(result)
                if n is not None:
                    span.set_attribute("hrt.store.result.count", n)
                return result

        return call


def tracing_from(exporter: str | None) -> Tracing | None:
    """The server's tracing for the exporter :func:`tracing_wanted` chose, or None (off). Imports
    the SDK only here: ``pip install 'hrt[otel]'`` when it is missing."""
    if exporter is None:
        return None
    try:
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ImportError as exc:
        from hrt.errors import HRTError

        raise HRTError(
            "OpenTelemetry tracing is asked for (OTEL_TRACES_EXPORTER or OTEL_EXPORTER_OTLP_ENDPOINT) but its "
            "packages are missing: pip install 'hrt[otel]'"
        ) from exc
    from hrt import __version__

    resource = Resource.create({"service.name": "hrt", "service.version": __version__}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource)
    span_exporter: SpanExporter
    if exporter == "console":
        span_exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        span_exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return Tracing(provider)
