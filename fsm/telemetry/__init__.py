"""Telemetry: the observers attached to the one event contract (`fsm.ports.Observer`).

- `observers`: the fan-out a kernel holds, the log observer and the metrics observer;
- `metrics`: the `Metrics` protocol a counter back end implements (`CountingMetrics`);
- `prometheus`: the Prometheus exporter (`jobfsm[metrics]`);
- `tracing`: OpenTelemetry spans of attempts and operator actions (`jobfsm[tracing]`).

Each exporter imports its library lazily, so `import fsm` never needs them.
"""
