"""The redaction rule lives in data_pipeline.redact: the data pipeline, upstream, needs it too."""

from data_pipeline.redact import redact, redact_text

__all__ = ["redact", "redact_text"]
