"""The runtime on Spark Structured Streaming (imports PySpark; the core never imports this).

``source`` (the sequencer as a streaming source) -> ``groupBy(worker)
.transformWithStateInPandas(processor.WorkerProcessor)`` -> ``sink``, started by
``pipeline``. No algorithm lives here: the pieces wrap the core's Gate,
Dispatcher and Engine.
"""
