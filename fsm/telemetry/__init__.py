"""Optional exporters: Prometheus metrics (`jobfsm[metrics]`) and OpenTelemetry spans
(`jobfsm[tracing]`). Each module imports its library lazily, so `import fsm` never needs them."""
