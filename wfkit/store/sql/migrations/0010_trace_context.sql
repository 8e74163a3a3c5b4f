-- The run's trace (OpenTelemetry, when the engine traces): the W3C traceparent of its run span,
-- chosen when the run is admitted, so that every engine process that advances the run adds its
-- spans to the same trace. NULL for runs admitted without tracing.
ALTER TABLE wf_instances ADD COLUMN trace_context VARCHAR;
