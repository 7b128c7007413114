"""The PySpark data source for lograft (arrives with the Spark issue)."""
