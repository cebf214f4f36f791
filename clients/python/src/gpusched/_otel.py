"""Optional OpenTelemetry hook: the current trace context as call metadata.

Used when a client is built with ``tracing=True``; ``opentelemetry-api`` is an optional
dependency (``pip install gpusched-client[otel]``), imported only then.
"""

from __future__ import annotations


def check_available() -> None:
    """Raises ImportError (with the fix) when opentelemetry-api is not installed."""
    try:
        import opentelemetry.propagate  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "tracing=True needs opentelemetry-api: pip install 'gpusched-client[otel]'"
        ) from e


def trace_metadata() -> tuple[tuple[str, str], ...]:
    """``traceparent``/``tracestate`` (and whatever else the global propagator injects) for the
    current OpenTelemetry context; empty when there is no active span."""
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple((k.lower(), v) for k, v in carrier.items())
