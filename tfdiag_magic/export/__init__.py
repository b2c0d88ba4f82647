"""Exports of a run's `Record` to the tools teams already use: a Trace Event file that Perfetto
and chrome://tracing open (`chrome_trace`), and TensorBoard scalars (`tensorboard`). Like the
views, they only read the record."""
