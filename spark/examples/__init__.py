"""Runnable Spark pipelines on lograft (``make spark-demo`` runs ``windowed_counts``)."""
