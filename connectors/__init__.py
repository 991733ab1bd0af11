"""ratiowatch connectors: the outside world (sources, sinks, metrics).

Connectors know only :mod:`ratiowatch.connectors.records` (``Record``, ``BadRecord``, ``Alert``); the daemon
(:mod:`ratiowatch.stream.engine.daemon`) wires them together from the TOML config.

Modules
-------
- :mod:`ratiowatch.connectors.sources` -- ``FileSource`` (CSV/JSONL, follow mode), ``StdinSource``, ``KafkaSource``.
- :mod:`ratiowatch.connectors.sinks` -- ``JsonlFileSink``, ``StreamSink`` (stdout/stderr), ``KafkaSink``, ``WebhookSink``;
  the same classes serve as the dead-letter sink.
- :mod:`ratiowatch.connectors.metrics` -- ``Metrics``: Prometheus registry and /metrics, /healthz, /readyz server.
- :mod:`ratiowatch.connectors.delivery` -- ``SinkWorker`` (one bounded queue and thread per sink,
  acknowledgement tickets), ``CircuitBreaker``.
- :mod:`ratiowatch.connectors.changelog` -- ``ChangelogStore``: checkpoints in a compacted Kafka topic.

Adding a source
---------------
Write a class with ``poll(max_records, timeout_s) -> list[Record | BadRecord]`` (every item with
``ref=(partition, offset)``; turn unparsable input into a ``BadRecord`` via
``ratiowatch.connectors.records.parse_record`` / ``bad_record``, never raise), an ``exhausted`` attribute (True
when a finite input is done), ``commit(positions: dict[partition, next_offset])`` that makes the
positions durable, and ``close()``. Then add its options to ``_SOURCE`` in ``stream/engine/config.py``
and a branch in ``ratiowatch.stream.engine.daemon.build_source``.

Adding a sink
-------------
Write a class with ``name``, ``deliver(items) -> list[(item, reason)]`` (items have ``to_json()``
and ``key``; return what you gave up on instead of raising), ``flush() -> list[(item, reason)]``
that returns only once everything delivered is acknowledged (the daemon commits offsets right
after), and ``close()``. Then add its options to ``_SINK`` in ``stream/engine/config.py`` and a branch
in ``ratiowatch.stream.engine.daemon.build_sink``.
"""
